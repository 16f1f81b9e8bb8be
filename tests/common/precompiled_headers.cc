// The one source of the suites' precompiled-header targets
// (tests/CMakeLists.txt). CMake builds a target's precompiled header beside its
// C++ sources, and GCC uses it only under the same code-generation flags, so
// these targets are executables, as the suites are; this program does nothing.
int main() { return 0; }
