package runtime_test

// The engine's own tests run jobs of the real kinds: this external test
// file registers them in the test binary (the kinds import runtime, so
// runtime's internal test files cannot import them).
import _ "github.com/mlstream/mlstream/kinds/all"
