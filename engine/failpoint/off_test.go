//go:build !failpoints

package failpoint

import "testing"

// TestOff: without the tag an armed environment changes nothing.
func TestOff(t *testing.T) {
	t.Setenv(EnvVar, WALAfterSegment+"=error")
	if Enabled {
		t.Fatal("Enabled without the failpoints tag")
	}
	for _, p := range Known() {
		if err := Hit(p); err != nil {
			t.Errorf("Hit(%s) = %v without the failpoints tag", p, err)
		}
	}
}
