//go:build !unix

package serve

import "errors"

// lockScratch: no flock here, so no directory is ever taken for dead (none is swept); each process still
// removes its own when the host ends it.
func lockScratch(string) (func(), error) { return nil, errors.New("no file locks on this platform") }
