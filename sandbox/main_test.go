package sandbox_test

import (
	"os"
	"testing"

	"polc.dev/polc/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(m.Run())
}
