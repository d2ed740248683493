//go:build !failpoints

package failpoint

// Enabled reports whether this binary was built with the failpoints tag.
const Enabled = false

// Hit marks the point name. Without the failpoints tag it does nothing, and the compiler removes the call.
func Hit(string) error { return nil }
