# Stands in for a tool CMake did not find, so that the ctest entries that need it fail
# with this message instead of silently disappearing: cmake -DMESSAGE=... -P missing_tool.cmake
message(FATAL_ERROR "${MESSAGE}")
