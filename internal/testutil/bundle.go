package testutil

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
)

// TamperBundle rewrites a bundle's policy modules so that they decide
// otherwise (hard gates made advisory) and keeps every other file, the
// signature included: a verifier must refuse it.
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
		if strings.Contains(h.Name, "polc/policies/") && strings.HasSuffix(h.Name, ".rego") {
			tampered := bytes.ReplaceAll(data, []byte(`"level": "hard"`), []byte(`"level": "advisory"`))
			changed = changed || !bytes.Equal(tampered, data)
			data = tampered
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
		return nil, errors.New("no policy module with a hard gate in the bundle")
	}
	return out.Bytes(), nil
}
