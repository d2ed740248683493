package registry

import (
	"context"
	"errors"
	"fmt"
)

// UpgradeHint says which version of plugin name to use instead of one that shares no protocol version with
// the engine: the newest version in the configured registries (the first that lists it) that is not yanked,
// speaks one of the engine's protocols and has a build for this platform, whatever a pipeline's constraint
// says; or that there is none. offline skips the look-up.
func (c *Client) UpgradeHint(ctx context.Context, name string, offline bool) string {
	if offline {
		return fmt.Sprintf("not looking in the registries for a version of %s that speaks protocol %v (--offline)", name, c.opts.Protocols)
	}
	si, res, err := c.Resolve(ctx, name, "")
	switch {
	case err == nil:
		return fmt.Sprintf("the newest version of %s that speaks protocol %v is %s (in %s): set `version: %q` on the connection, or run `skippr plugin install %s@%s`",
			name, c.opts.Protocols, res.Version, si.Registry.URL, res.Version, name, res.Version)
	case errors.Is(err, ErrIncompatible), errors.Is(err, ErrNotFound):
		return fmt.Sprintf("no version of %s in the configured registries speaks protocol %v: rebuild it with a plugin SDK that speaks it (%v)", name, c.opts.Protocols, err)
	}
	return fmt.Sprintf("could not look in the registries for a version of %s that speaks protocol %v: %v", name, c.opts.Protocols, err)
}
