# Every package states the project's version (VERSION, from project()): the Rust crates
# (the workspace's version and octattn's requirement of octattn-sys) and the Go module's
# ModuleVersion, whose tag is bindings/go/v<VERSION>. The Python package reads it from
# CMakeLists.txt itself (pyproject.toml).
function(expect file regex)
  file(READ ${SOURCE}/${file} text)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "${file}: no match for ${regex}")
  endif()
  if(NOT CMAKE_MATCH_1 STREQUAL VERSION)
    message(FATAL_ERROR "${file} says ${CMAKE_MATCH_1}, the project ${VERSION}")
  endif()
endfunction()
expect(bindings/rust/Cargo.toml "\\[workspace\\.package\\][^[]*\nversion = \"([0-9.]+)\"")
expect(bindings/rust/octattn/Cargo.toml "octattn-sys = {[^}]*version = \"([0-9.]+)\"")
expect(bindings/go/octattn.go "const ModuleVersion = \"([0-9.]+)\"")
message(STATUS "every package says ${VERSION}")
