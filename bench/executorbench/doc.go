// Package executorbench holds the executor's benchmarks (bench/executor.sh
// runs them). They live apart from the executor's tests so that their test
// binary is shaped like a runtime integrator's: it links the executor, the
// snapshot reader and the evidence store, but not the compiler (no CUE, no
// OPA). The executor's own test binary links the compiler to build its
// policies, and its larger globals and heap make every garbage collection
// cycle, and so every call, dearer than an integrator's (~16% for the
// minimal profile, measured).
//
// The policy is the executor tests' testPolicy, compiled to
// testdata/snapshot.json; the executor package's TestBenchSnapshotUpToDate
// keeps the file equal to it (POLC_UPDATE=1 rewrites it).
package executorbench
