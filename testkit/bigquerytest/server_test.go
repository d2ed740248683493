package bigquerytest

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"cloud.google.com/go/bigquery"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/skippr-dev/skippr/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestCreateWhatExists: a tables.insert or datasets.insert of a name that exists is answered as BigQuery
// answers it, 409 duplicate ("Already Exists"), however the name came to exist; and a create whose client
// went away while it ran completes, as BigQuery completes a request it received, so the client's retry finds
// it. (The stand-in cut such a create short, or lost it with PostgreSQL's table made: the retry then got
// PostgreSQL's "relation already exists" as a 400, which the plugin takes for a config fault.)
func TestCreateWhatExists(t *testing.T) {
	schema := bigquery.Schema{{Name: "id", Type: bigquery.IntegerFieldType}}
	createTable := func(c *bigquery.Client) error {
		return c.Dataset("d").Table("t").Create(context.Background(), &bigquery.TableMetadata{Schema: schema})
	}
	for _, tc := range []struct {
		name string
		// made makes what again creates exist (dataset ds exists already).
		made  func(t *testing.T, s *Server, c *bigquery.Client, ds, table string)
		again func(c *bigquery.Client) error
	}{
		{name: "created", again: createTable, made: func(t *testing.T, s *Server, c *bigquery.Client, ds, table string) {
			if err := c.Dataset(ds).Table(table).Create(context.Background(), &bigquery.TableMetadata{Schema: schema}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "client killed while creating", again: createTable, made: func(t *testing.T, s *Server, c *bigquery.Client, ds, table string) {
			s.CreateAbandoned(t, ds, table, func(ctx context.Context) error {
				return c.Dataset(ds).Table(table).Create(ctx, &bigquery.TableMetadata{Schema: schema})
			})
			md, err := c.Dataset(ds).Table(table).Metadata(context.Background())
			if err != nil || len(md.Schema) != 1 || md.Schema[0].Name != "id" {
				t.Fatalf("the table the killed client created: %+v, %v; want its schema (id)", md, err)
			}
		}},
		{name: "made in PostgreSQL only", again: createTable, made: func(t *testing.T, s *Server, c *bigquery.Client, ds, table string) {
			if _, err := s.Pool().Exec(context.Background(), "CREATE TABLE "+pgIdent(ds)+"."+pgIdent(table)+" (id bigint)"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "dataset created", made: func(t *testing.T, s *Server, c *bigquery.Client, ds, table string) {},
			again: func(c *bigquery.Client) error { return c.Dataset("d").Create(context.Background(), nil) }},
		{name: "dataset made in PostgreSQL only", made: func(t *testing.T, s *Server, c *bigquery.Client, ds, table string) {
			if _, err := s.Pool().Exec(context.Background(), "CREATE SCHEMA e"); err != nil {
				t.Fatal(err)
			}
		}, again: func(c *bigquery.Client) error { return c.Dataset("e").Create(context.Background(), nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := Start(t, "p")
			c, err := bigquery.NewClient(ctx, s.Project, option.WithEndpoint(s.URL+"/bigquery/v2/"), option.WithoutAuthentication(),
				option.WithHTTPClient(http.DefaultClient))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if err := c.Dataset("d").Create(ctx, nil); err != nil {
				t.Fatal(err)
			}
			tc.made(t, s, c, "d", "t")
			err = tc.again(c)
			var ge *googleapi.Error
			if !errors.As(err, &ge) || ge.Code != http.StatusConflict || len(ge.Errors) == 0 || ge.Errors[0].Reason != "duplicate" {
				t.Fatalf("create again: %v; want 409 duplicate", err)
			}
		})
	}
}
