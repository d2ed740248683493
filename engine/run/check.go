package run

import (
	"context"
	"errors"
	"fmt"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// Check runs a started connection's plugin Check (`skippr connect`). A failed check names the connection's
// place in the config, with the plugin's fix, and is Refused like a config error (sync refuses the pipeline
// the same way) unless its class is permanent and not the config's: a lost source position is not something
// a setting fixes, so that one is Failed.
func Check(ctx context.Context, p *connector.Plugin) error {
	err := p.Check(ctx)
	var ce *client.CheckError
	if !errors.As(err, &ce) {
		return err
	}
	msg := fmt.Sprintf("%s: connections.%s: %s", p.Conn.Pos, p.Conn.Name, ce.Message)
	if ce.Fix != "" {
		msg += "\n  fix: " + ce.Fix
	}
	code := Refused
	if ce.Class.Permanent() && ce.Class != fault.Config {
		code = Failed
	}
	return withCode(code, errors.New(msg))
}
