package images

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// OCIRef is what names an OCI image layout tar's one image: the name
// containerd gives it (the index's io.containerd.image.name annotation)
// and its ID (its config's digest, hex), which containers/storage gives it.
type OCIRef struct {
	Name, ID string
}

// ReadOCIRef reads an OCI image layout tar's OCIRef: podman loads such a
// tar without a name, and a CRI-O node finds its images by name.
func ReadOCIRef(path string) (OCIRef, error) {
	f, err := os.Open(path)
	if err != nil {
		return OCIRef{}, err
	}
	defer f.Close()
	ref, err := readOCIRef(f)
	if err != nil {
		return OCIRef{}, fmt.Errorf("OCI image tar %s: %w", path, err)
	}
	return ref, nil
}

type descriptor struct {
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
}

func readOCIRef(r io.Reader) (OCIRef, error) {
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	blobs := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return OCIRef{}, err
		}
		name := strings.TrimPrefix(h.Name, "./")
		switch {
		case name == "index.json":
			if err := json.NewDecoder(tr).Decode(&index); err != nil {
				return OCIRef{}, fmt.Errorf("index.json: %w", err)
			}
		case strings.HasPrefix(name, "blobs/sha256/") && h.Size < 1<<20:
			// Manifests and configs; layers are larger, or unread.
			if blobs[strings.TrimPrefix(name, "blobs/sha256/")], err = io.ReadAll(tr); err != nil {
				return OCIRef{}, err
			}
		}
	}
	if len(index.Manifests) != 1 {
		return OCIRef{}, fmt.Errorf("index.json: %d manifests, want 1", len(index.Manifests))
	}
	m := index.Manifests[0]
	ref := OCIRef{Name: m.Annotations["io.containerd.image.name"]}
	if ref.Name == "" {
		return OCIRef{}, errors.New("index.json: no io.containerd.image.name annotation")
	}
	var manifest struct {
		Config descriptor `json:"config"`
	}
	blob, ok := blobs[strings.TrimPrefix(m.Digest, "sha256:")]
	if !ok {
		return OCIRef{}, fmt.Errorf("manifest %s: not in the tar", m.Digest)
	}
	if err := json.Unmarshal(blob, &manifest); err != nil {
		return OCIRef{}, fmt.Errorf("manifest %s: %w", m.Digest, err)
	}
	ref.ID = strings.TrimPrefix(manifest.Config.Digest, "sha256:")
	if len(ref.ID) != 64 {
		return OCIRef{}, fmt.Errorf("manifest %s: config digest %q", m.Digest, manifest.Config.Digest)
	}
	return ref, nil
}
