package harness

import (
	"fmt"
	"path/filepath"
)

// KeylessLakeSettings are the iceberg settings of writeKeylessConfig's lake.
func KeylessLakeSettings(e *Env) string {
	return fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.Dir, "lake"))
}
