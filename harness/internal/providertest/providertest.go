// Package providertest finds the pinned provider CLIs for tests. Tests that
// need one skip, saying how to install it, when it is absent; CI installs
// all three (.ci/install-providers) and sets POLC_REQUIRE_PROVIDERS=1, which
// turns the skip into a failure.
package providertest

import (
	"os"
	"testing"

	"polc.dev/polc/harness"
)

// Executable returns the pinned CLI of provider from the providers cache,
// or skips the test (fails it under POLC_REQUIRE_PROVIDERS=1).
func Executable(t testing.TB, provider string) string {
	t.Helper()
	if p := harness.CachedExecutable(provider); p != "" {
		return p
	}
	msg := "provider CLI " + harness.ProviderPackages[provider] + " is not installed in " + harness.ProvidersDir() + "; run .ci/install-providers"
	if os.Getenv("POLC_REQUIRE_PROVIDERS") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
