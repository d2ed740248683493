package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"vitess.io/vitess/go/mysql/sqlerror"
	"vitess.io/vitess/go/sqltypes"

	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// Teardown deletes this reader's row of the watermark table, the one thing a pipeline leaves on the server: a
// binary log reader holds nothing there (no slot; the server keeps its binary log by its own retention). The
// table itself stays, because other pipelines reading the same server may be writing their marks to it at this
// moment, and dropping it under them would fail their re-snapshot. The row is the reader's server_id, derived
// from the pipeline's name as Read derives it ("" when the engine did not say).
func Teardown(ctx context.Context, raw json.RawMessage, pipeline string) ([]string, error) {
	cfg, err := config.ParseFor(raw, pipeline)
	if err != nil {
		return nil, err
	}
	conn, err := cfg.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	table := config.QuoteIdent(cfg.WatermarkDatabase) + "." + config.QuoteIdent(watermarkTable)
	res, err := conn.ExecuteFetch("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = "+sqltypes.EncodeStringSQL(cfg.WatermarkDatabase)+
		" AND TABLE_NAME = "+sqltypes.EncodeStringSQL(watermarkTable), 1, false)
	if err != nil {
		return nil, cfg.Explain(err)
	}
	if len(res.Rows) == 0 {
		return nil, nil // no re-snapshot ever ran against this server
	}
	reader := strconv.FormatUint(uint64(cfg.ServerID), 10)
	del := "DELETE FROM " + table + " WHERE reader = " + sqltypes.EncodeStringSQL(reader)
	res, err = conn.ExecuteFetch(del, 0, false)
	if err != nil {
		var se *sqlerror.SQLError
		if errors.As(err, &se) && (se.Number() == sqlerror.ERTableAccessDenied || se.Number() == sqlerror.ERSpecifiedAccessDenied) {
			// The re-snapshot needs only INSERT and UPDATE on the table; a leftover row of 1 KiB harms nothing,
			// so a user without DELETE gets the statement rather than a failed teardown.
			slog.Warn("the watermark row of this pipeline stays: the user may not delete it; run as a user who may: "+del, "table", cfg.WatermarkDatabase+"."+watermarkTable, "err", err)
			return nil, nil
		}
		return nil, fmt.Errorf("delete the watermark row of reader %s from %s.%s: %w", reader, cfg.WatermarkDatabase, watermarkTable, cfg.Explain(err))
	}
	if res.RowsAffected == 0 {
		return nil, nil
	}
	return []string{fmt.Sprintf("watermark row of reader %s in %s.%s (the table stays: other pipelines may use it)", reader, cfg.WatermarkDatabase, watermarkTable)}, nil
}
