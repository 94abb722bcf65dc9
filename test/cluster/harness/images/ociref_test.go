package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// ociTar is an OCI image layout tar of one image: its index names the
// manifest with the annotations, the manifest names config.
func ociTar(t *testing.T, annotations, config string) []byte {
	t.Helper()
	sum := func(b string) string { s := sha256.Sum256([]byte(b)); return hex.EncodeToString(s[:]) }
	manifest := fmt.Sprintf(`{"schemaVersion":2,"config":{"digest":"sha256:%s"},"layers":[]}`, sum(config))
	index := fmt.Sprintf(`{"schemaVersion":2,"manifests":[{"digest":"sha256:%s","annotations":%s}]}`, sum(manifest), annotations)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, body := range map[string]string{"index.json": index, "oci-layout": `{"imageLayoutVersion":"1.0.0"}`,
		"blobs/sha256/" + sum(manifest): manifest, "blobs/sha256/" + sum(config): config} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	return b.Bytes()
}

func TestReadOCIRef(t *testing.T) {
	config := `{"architecture":"amd64","os":"linux"}`
	s := sha256.Sum256([]byte(config))
	got, err := readOCIRef(bytes.NewReader(ociTar(t, `{"io.containerd.image.name":"rt.local/x:1","org.opencontainers.image.ref.name":"1"}`, config)))
	if err != nil {
		t.Fatal(err)
	}
	if want := (OCIRef{Name: "rt.local/x:1", ID: hex.EncodeToString(s[:])}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// Without containerd's name annotation (the OCI one holds only the tag) there is no name to give it.
	_, err = readOCIRef(bytes.NewReader(ociTar(t, `{"org.opencontainers.image.ref.name":"1"}`, config)))
	if err == nil || !strings.Contains(err.Error(), "io.containerd.image.name") {
		t.Errorf("got %v, want an error naming the missing annotation", err)
	}
}
