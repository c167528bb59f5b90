// The environment of a pgtide whose writes to one file family fail with ENOSPC past a size
// (tests/preload/enospc_preload.cpp, LD_PRELOADed).
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#ifndef PGTIDE_ENOSPC_PRELOAD
#error "PGTIDE_ENOSPC_PRELOAD must name the preload library (tests/CMakeLists.txt)"
#endif

namespace pgtide::testing {

/// Writes that would grow a file whose path starts with `path` past `bytes` fail with ENOSPC.
inline std::vector<std::string> enospc_env(const std::string& path, long bytes) {
    const char* asan = std::getenv("ASAN_OPTIONS");
    return {std::string("LD_PRELOAD=") + PGTIDE_ENOSPC_PRELOAD, "PGTIDE_FAULT_ENOSPC_PATH=" + path,
            "PGTIDE_FAULT_ENOSPC_BYTES=" + std::to_string(bytes),
            // The preloaded library comes before the ASan runtime in a sanitizer build.
            std::string("ASAN_OPTIONS=") + (asan != nullptr ? asan : "") +
                (asan != nullptr && *asan != '\0' ? ":" : "") + "verify_asan_link_order=0"};
}

} // namespace pgtide::testing
