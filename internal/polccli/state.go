package polccli

import "polc.dev/polc/executor"

// openState opens the durable profile's store.
func openState(e *env, path string) (executor.StateStore, func(), error) {
	return nil, func() {}, usagef("the durable profile needs a state store (--state FILE), which this build does not have yet")
}
