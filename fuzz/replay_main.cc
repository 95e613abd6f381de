// Replays fuzz inputs without libFuzzer: every file named on the command line, or found
// in a directory named there, goes through LLVMFuzzerTestOneInput once, in name order.
// With OCTATTN_REPLAY_EVERY=N (emulated runs, where an input costs a hundred times a
// native one) a directory's inputs are taken one in N, in name order.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int RunFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 0, errors = 0, found = 0;
  const char* every_env = std::getenv("OCTATTN_REPLAY_EVERY");
  const int every = every_env ? std::max(1, std::atoi(every_env)) : 1;
  for (int i = 1; i < argc; ++i) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      std::fprintf(stderr, "no such file or directory: %s\n", argv[i]);
      return 1;
    }
    if (S_ISDIR(st.st_mode)) {
      DIR* dir = opendir(argv[i]);
      std::vector<std::string> files;
      while (dirent* e = readdir(dir))
        if (e->d_name[0] != '.') files.push_back(std::string(argv[i]) + "/" + e->d_name);
      closedir(dir);
      std::sort(files.begin(), files.end());
      found += static_cast<int>(files.size());
      for (size_t f = 0; f < files.size(); f += static_cast<size_t>(every))
        errors += RunFile(files[f]), ++runs;
    } else {
      errors += RunFile(argv[i]);
      ++runs;
      ++found;
    }
  }
  std::printf("replayed %d of %d inputs\n", runs, found);
  return errors || runs == 0 ? 1 : 0;
}
