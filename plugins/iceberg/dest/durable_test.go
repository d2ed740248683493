package dest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLocalFile(t *testing.T) {
	for _, c := range []struct {
		loc, path string
		local     bool
	}{
		{"file:///wh/t/data/a.parquet", "/wh/t/data/a.parquet", true},
		{"/wh/t/metadata/v2.metadata.json", "/wh/t/metadata/v2.metadata.json", true},
		{"s3://bucket/wh/t/data/a.parquet", "", false},
		{"relative/a.parquet", "", false},
	} {
		if p, ok := localFile(c.loc); p != c.path || ok != c.local {
			t.Errorf("%s: %q %v, want %q %v", c.loc, p, ok, c.path, c.local)
		}
	}
}

func TestSyncFiles(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "a.parquet")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A file removed after a failed attempt is no error; a remote location is skipped.
	if err := syncFiles([]string{"file://" + f, filepath.Join(dir, "gone"), "s3://b/k"}); err != nil {
		t.Fatal(err)
	}
	if err := syncFiles([]string{filepath.Join(dir, "missing-dir", "x")}); err != nil {
		t.Fatalf("a missing file's directory: %v", err)
	}
}
