// Command skippr-plugin-testdest is the conformance kit's file destination as a real plugin process: tests
// use it until a real destination is wired in, and to check exactly-once delivery row by row.
package main

import (
	"strconv"
	"strings"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

var version = "0.1.0"

// protocols, when set at build time (-ldflags "-X main.protocols=1"), replaces the protocol versions the SDK
// offers: the engine's tests build a plugin as an older SDK would have, to see it refused.
var protocols string

func main() {
	var opts []serve.Option
	if protocols != "" {
		var vs []int
		for _, f := range strings.Split(protocols, ",") {
			v, err := strconv.Atoi(f)
			if err != nil {
				panic("testdest: bad -X main.protocols: " + protocols)
			}
			vs = append(vs, v)
		}
		opts = append(opts, serve.WithProtocolVersions(vs...))
	}
	serve.Serve(&filedest.Destination{Version: version}, opts...)
}
