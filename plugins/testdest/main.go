// Command skippr-plugin-testdest is the conformance kit's file destination as a real plugin process: tests
// use it until a real destination is wired in, and to check exactly-once delivery row by row.
package main

import (
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

var version = "0.1.0"

func main() { serve.Serve(&filedest.Destination{Version: version}) }
