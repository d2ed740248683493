// Command skippr-plugin-datagen is a deterministic source: event i of a seed is always the same row, so a read
// from any checkpoint replays exactly. Benchmarks and chaos tests drive the engine with it.
package main

import (
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/datagen/gen"
)

// version is the plugin's release version, set at build time with -ldflags "-X main.version=…".
var version = "0.1.0"

func main() { serve.Serve(&gen.Source{Version: version}) }
