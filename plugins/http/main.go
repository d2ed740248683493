// Command skippr-plugin-http is a push source: clients POST JSON or NDJSON records over HTTP, the schema is
// inferred and evolved per stream, and a request is answered 200 only once its data is durable in the
// engine's WAL. See README.md.
package main

import (
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/http/ingest"
)

// version is the plugin's release version, set at build time with -ldflags "-X main.version=…".
var version = "0.1.0"

func main() { serve.Serve(ingest.New(version)) }
