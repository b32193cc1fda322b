// The process's peak resident memory (docs/architecture.md §7 "Memory plan"): what
// `olmo2 train` reports per rank beside the memory plan's prediction.
#pragma once

#include <cstdint>
#include <string>

namespace olmo2::monitoring {

/// Peak resident set size of this process in bytes: VmHWM of /proc/self/status (Linux;
/// the kernel's high-water mark of resident pages, file-backed ones included). 0 when
/// the file or the field cannot be read (not Linux). Throws nothing.
int64_t peak_resident_bytes();

/// VmHWM read out of the text of a /proc/PID/status file, in bytes (the field is in kB);
/// 0 when the field is absent or malformed. Throws nothing.
int64_t parse_vm_hwm(const std::string& status_text);

}  // namespace olmo2::monitoring
