package polccli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
)

// The bundle-server layout (docs/scale.md, "An OPA fleet"): the current
// bundle at bundles/<bundleName>.tar.gz, the bundle of every revision
// published at revisions/<revision>.tar.gz. Both are replaced only by
// renames, so a reader (polc bundle serve, any static HTTP server) sees a
// whole bundle, old or new.
const (
	bundlesDir   = "bundles"
	revisionsDir = "revisions"
	bundleName   = "polc"
	bundleExt    = ".tar.gz"
)

// maxPublishedBundle bounds the bundle polc bundle publish reads: OPA's own
// default limit for one file of a bundle.
const maxPublishedBundle = 1 << 30

// servedName is a name polc bundle publish gives a file of the layout: a
// revision (or the bundle name) and the extension. Anything else (the
// temporary files of an atomic write begin with a dot) is never served.
var servedName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.tar\.gz$`)

func newBundleCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "bundle",
		Short: "Publish and serve signed bundles for a fleet of OPA servers",
	}
	c.AddCommand(newBundlePublishCmd(e), newBundleServeCmd(e))
	return c
}

// bundleETag is the entity tag of a bundle file's bytes: the hex sha256,
// quoted (a strong tag). It depends on the bytes alone, so every server of
// one layout (or a copy of it) gives a bundle the same tag.
func bundleETag(data []byte) string {
	sum := sha256.Sum256(data)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

// bundleFiles reads the files of a bundle (.tar.gz) by path, without the
// leading slash OPA's writer puts on them. The sum of their sizes is
// bounded by maxPublishedBundle: a small archive may inflate without
// bound.
func bundleFiles(data []byte) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	var total int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if total += h.Size; total > maxPublishedBundle {
			return nil, fmt.Errorf("the bundle's files hold more than %d bytes", maxPublishedBundle)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("the bundle holds %s twice", name)
		}
		files[name] = b
	}
}

// sameSignedContent reports whether two bundles hold the same files but
// for their signatures: the same bundle signed twice (an ECDSA signature
// differs every time).
func sameSignedContent(a, b []byte) (bool, error) {
	fa, err := bundleFiles(a)
	if err != nil {
		return false, err
	}
	fb, err := bundleFiles(b)
	if err != nil {
		return false, err
	}
	delete(fa, ".signatures.json")
	delete(fb, ".signatures.json")
	return maps.EqualFunc(fa, fb, bytes.Equal), nil
}

// errNotServed is the error of a path outside the layout.
var errNotServed = errors.New("not a file of the bundle layout")

// layoutFile maps a URL path to the file of the layout it names:
// /bundles/NAME.tar.gz or /revisions/NAME.tar.gz, nothing else.
func layoutFile(urlPath string) (string, error) {
	dir, name, ok := strings.Cut(strings.TrimPrefix(urlPath, "/"), "/")
	if !ok || (dir != bundlesDir && dir != revisionsDir) || !servedName.MatchString(name) {
		return "", errNotServed
	}
	return dir + "/" + name, nil
}
