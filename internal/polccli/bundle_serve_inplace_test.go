package polccli

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestBundleServeETagAfterInPlaceCopy: the ETag cache was keyed by (dev,
// ino, size, mtime). A bundle replaced in place (same inode) by one of the
// same size whose mtime is carried over (cp -p, install -p, rsync
// --inplace -t, files with a fixed SOURCE_DATE_EPOCH mtime) kept the old
// ETag: the server answered 304 to a client running the old bundle, and
// sent the new bytes under the old bundle's tag. The key now holds the
// ctime too, which every write sets, and no tag is remembered for a file
// changed lately. The documented ETag is the sha256 of the bytes sent.
func TestBundleServeETagAfterInPlaceCopy(t *testing.T) {
	dir := t.TempDir()
	one, two := bytes.Repeat([]byte{1}, 1000), bytes.Repeat([]byte{2}, 1000)
	writeLayoutFile(t, dir, "bundles/polc.tar.gz", one)
	p := filepath.Join(dir, "srv", "bundles", "polc.tar.gz")
	fixed := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC) // SOURCE_DATE_EPOCH-style
	if err := os.Chtimes(p, fixed, fixed); err != nil {
		t.Fatal(err)
	}
	f := startBundleServe(t, dir, &bundleServeParams{})
	if status, h, _ := f.get("GET", "/bundles/polc.tar.gz"); status != 200 || h.Get("ETag") != bundleETag(one) {
		t.Fatalf("GET: %d %v", status, h)
	}
	// cp -p new.tar.gz DIR/bundles/polc.tar.gz: same inode, truncated and
	// rewritten, the source's mtime carried over.
	if err := os.WriteFile(p, two, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fixed, fixed); err != nil {
		t.Fatal(err)
	}
	status, h, body := f.get("GET", "/bundles/polc.tar.gz", "If-None-Match", bundleETag(one))
	if status != http.StatusOK || !bytes.Equal(body, two) || h.Get("ETag") != bundleETag(two) {
		t.Fatalf("after an in-place copy of another bundle: %d, ETag %s (old %s, new %s), %d bytes: the fleet keeps the old bundle",
			status, h.Get("ETag"), bundleETag(one), bundleETag(two), len(body))
	}
}
