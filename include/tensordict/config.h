// tensordict/config.h — what this build of the library has, as macros.
//
//   TENSORDICT_HAS_AOTI   1 where LibTorch has AOTInductor's package loader
//                         (2.6 and later): <tensordict/export.h> and
//                         AOTIModule are there; 0 elsewhere (1.13), where
//                         including <tensordict/export.h> is an error. The
//                         CMake package sets the variable of the same name.
//
//   #include <tensordict/config.h>
//   #if TENSORDICT_HAS_AOTI
//   #include <tensordict/export.h>
//   #endif
#pragma once

#ifndef TENSORDICT_HAS_AOTI
// CMakeLists.txt builds src/export/ exactly when it finds this header among
// LibTorch's.
#if defined(__has_include)
#if __has_include(<torch/csrc/inductor/aoti_package/model_package_loader.h>)
#define TENSORDICT_HAS_AOTI 1
#endif
#endif
#endif
#ifndef TENSORDICT_HAS_AOTI
#define TENSORDICT_HAS_AOTI 0
#endif
