package e2e

import (
	"testing"

	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, harness.Versity.Stop, testplugins.Cleanup) }
