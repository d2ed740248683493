package main

import (
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// Not parallel: the replay check wants byte-identical checkpoints, and a snapshot's checkpoints record the
// server's binlog position when other writes moved it (overlap); the package's parallel tests share the server.
func TestConformance(t *testing.T) {
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE items (id bigint PRIMARY KEY, name varchar(40), price decimal(10,2));
		INSERT INTO items SELECT seq, concat('item ', seq), seq * 1.5 FROM seq_1_to_45`)
	good := settings(db, map[string]any{"tables": []string{"items"}, "batch_size": 10})
	u := db.Server.CreateUser(t)
	bad := settings(db, map[string]any{"tables": []string{"items"}, "user": u.Name, "password": "wrong"})
	conformance.Run(t, conformance.Config{Binary: pluginBin, Settings: good, BadSettings: bad})
}
