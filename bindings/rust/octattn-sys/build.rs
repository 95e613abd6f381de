//! Links liboctattn as pkg-config finds it (an installed octattn.pc, e.g. under
//! PKG_CONFIG_PATH=<prefix>/lib/pkgconfig after `cmake --install`), at version 0.10 or
//! later; OCTATTN_STATIC=1 links the static library and its dependencies. Where DOCS_RS
//! is set (docs.rs) nothing is linked.
fn main() {
    // docs.rs documents the crate without liboctattn: nothing to link there.
    if std::env::var_os("DOCS_RS").is_some() {
        return;
    }
    println!("cargo:rerun-if-env-changed=OCTATTN_STATIC");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let statik = std::env::var("OCTATTN_STATIC")
        .map(|v| v == "1")
        .unwrap_or(false);
    match pkg_config::Config::new()
        .atleast_version("0.10")
        .statik(statik)
        .probe("octattn")
    {
        Ok(lib) => {
            for dir in &lib.link_paths {
                println!("cargo:libdir={}", dir.display());
            }
        }
        Err(e) => panic!(
            "octattn-sys: liboctattn >= 0.10 not found by pkg-config ({e}).\n\
             Install it (cmake --install build/release --prefix <prefix>) and set \
             PKG_CONFIG_PATH=<prefix>/lib/pkgconfig."
        ),
    }
}
