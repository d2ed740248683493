package main

import (
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	// A server of its own: the replay check wants byte-identical checkpoints, and a snapshot resumed after any
	// WAL was written since the slot's start (by any database of the server, as the package's other tests do
	// on the shared one) records an overlap that the first read had not.
	db := pgtest.StartServer(t, pgtest.Options{}).NewDB(t)
	db.Exec(t, `CREATE TABLE items (id bigint PRIMARY KEY, name text, price numeric(10,2));
		ALTER TABLE items REPLICA IDENTITY FULL;
		INSERT INTO items SELECT g, 'item ' || g, g * 1.5 FROM generate_series(1, 45) g`)
	good := settings(db, map[string]any{"tables": []string{"public.items"}, "slot": slot(db), "batch_size": 10, "schema": "conformance_dest"})
	bad := settings(db, map[string]any{"tables": []string{"public.items"}, "password": "wrong", "user": db.Server.CreateRole(t).Name})
	conformance.Run(t, conformance.Config{Binary: pluginBin, Settings: good, BadSettings: bad})
}
