package dest

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
)

// syncFiles fsyncs local files and their directories. iceberg-go's local file system closes the files it
// writes without fsync, while the SQLite catalog commits with synchronous=FULL: after a power loss the
// catalog could name data files, manifests or metadata the disk never got — and the engine reclaims a WAL
// entry once its apply returned. Object stores need nothing: a completed PUT is durable.
func syncFiles(names []string) error {
	dirs := map[string]bool{}
	for _, n := range names {
		p, ok := localFile(n)
		if !ok {
			continue
		}
		if err := fsync(p); err != nil {
			return err
		}
		dirs[filepath.Dir(p)] = true
	}
	for d := range dirs {
		if err := fsync(d); err != nil {
			return err
		}
	}
	return nil
}

// localFile is the path of a file:// location or an absolute path; false for remote locations.
func localFile(loc string) (string, bool) {
	if filepath.IsAbs(loc) {
		return loc, true
	}
	u, err := url.Parse(loc)
	if err != nil || u.Scheme != "file" {
		return "", false
	}
	return u.Path, true
}

func fsync(path string) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil // a file an attempt created and removed again
	}
	if err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}
