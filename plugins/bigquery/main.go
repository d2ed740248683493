// Command skippr-plugin-bigquery is skippr's BigQuery destination (package dest): each coalesced range of the
// WAL is staged through the Storage Write API and merged into the tables by key in one multi-statement
// transaction together with a state row, so a replay is exactly-once. README.md has the settings, the type
// table, and the cost of an apply.
package main

import (
	"github.com/skippr-dev/skippr/plugin-sdk/serve"

	"github.com/skippr-dev/skippr/plugins/bigquery/dest"
)

var version = "0.1.0"

func main() {
	serve.Serve(&dest.Destination{Version: version}) // it closes the sessions' clients when the host ends it
}
