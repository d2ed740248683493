package dest

import (
	"database/sql/driver"

	sf "github.com/snowflakedb/gosnowflake"

	"github.com/skippr-dev/skippr/plugins/snowflake/sfsql"
)

func sfConnector(cfg sf.Config) driver.Connector { return sf.NewConnector(sf.SnowflakeDriver{}, cfg) }

func sfsqlBegin(name string) string { return sfsql.Begin(name) }

// sfsqlUpsertState binds pipeline, stream, sequence and the fence.
func sfsqlUpsertState(db, schema string) string {
	return sfsql.UpsertState(sfsql.Name(db), sfsql.Name(schema), 1)
}
