// The public header compiled as C++ with -fno-exceptions -fno-rtti (see CMakeLists.txt).
#include "octattn.h"

int octattn_abi_header_noexcept_probe() {
  octattn_attention_options options;
  return static_cast<int>(sizeof(options)) + OCTATTN_VERSION_NUMBER;
}
