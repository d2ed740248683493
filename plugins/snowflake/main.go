// Command skippr-plugin-snowflake is skippr's Snowflake destination (package dest): each apply is a Parquet
// file PUT to the table's stage, then COPY INTO a staging table, MERGE by key and the state row in one
// transaction, so a replay after a crash is skipped and never duplicates a row.
package main

import (
	"os"
	"runtime/debug"

	sf "github.com/snowflakedb/gosnowflake"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"

	"github.com/skippr-dev/skippr/plugins/snowflake/dest"
)

var version = "0.1.0"

func main() {
	// The driver logs every failed statement itself; the plugin returns each as an error with its context,
	// so the driver's own lines would only repeat them.
	_ = sf.GetLogger().SetLogLevel("OFF")
	// Arrow buffers come from Go's allocator, so a chunk the apply wrote out and dropped is garbage the
	// collector frees only once the heap has doubled (GOGC=100): without a limit the process holds about twice
	// its working set. With dest.MemoryLimit the collector runs harder as the heap nears it (README, Memory).
	// A GOMEMLIMIT in the plugin's environment wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(dest.MemoryLimit)
	}
	serve.Serve(&dest.Destination{Version: version}) // it closes the sessions' pools when the host ends it
}
