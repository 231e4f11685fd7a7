package testutil

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
)

// TamperBundle rewrites a bundle's data.json so that its policies decide
// otherwise (an allow list of "*", hard gates made advisory) and keeps
// every other file, the signature included: a verifier must refuse it.
func TamperBundle(bundle []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(bundle))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	changed := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(h.Name, "data.json") {
			data = bytes.Replace(data, []byte(`"allow":[]`), []byte(`"allow":["*"]`), 1)
			data = bytes.Replace(data, []byte(`"level":"hard"`), []byte(`"level":"advisory"`), 1)
			changed = true
		}
		h.Size = int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if !changed {
		return nil, errors.New("no data.json in the bundle")
	}
	return out.Bytes(), nil
}
