package run

import (
	"testing"

	"github.com/skippr-dev/skippr/internal/testplugins"
)

// TestMain removes the plugin binaries the tests built.
func TestMain(m *testing.M) { testplugins.Main(m) }
