package fault_test

import (
	"errors"
	"fmt"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// The package doc's example, compiled: a plugin classes an error and the engine matches the class.
func ExampleConfigErr() {
	host, user := "db.example.com", "loader"
	err := fault.ConfigErr(fmt.Errorf("connect %s: password authentication failed for user %q", host, user),
		"set the connection's password (settings.password) to the role's password")
	fmt.Println(errors.Is(err, fault.ErrConfig), fault.ClassOf(err))
	fmt.Println(fault.FixOf(err))
	// Output:
	// true config
	// set the connection's password (settings.password) to the role's password
}
