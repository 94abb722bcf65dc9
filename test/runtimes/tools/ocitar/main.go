// Command ocitar writes an OCI image layout as a tar file, the format `ctr
// images import` reads, so that the runtime suites and the Kubernetes
// harness need no image registry: its layers are the tars given with
// -layer, in order, then one of the files given with -add, -link and -dir
// (when there are any, or no -layer). That file tree can also be written
// to a directory (a rootfs for `podman run --rootfs`).
//
//	ocitar -o app.tar -name rt.local/ovsflow-app:1 -entrypoint '["/rt-echo"]' \
//	       -add /rt-echo=bin/rt-echo -add /bin/busybox=/bin/busybox \
//	       -link /bin/sh=busybox -dir /tmp -rootfs ./rootfs
//	ocitar -o nginx.tar -name registry.k8s.io/e2e-test-images/nginx:1.27.0-2 \
//	       -entrypoint '["nginx", "-g", "daemon off;"]' -layer base.tar
//
// The output is deterministic: entries sorted by path, fixed times and owners,
// so the same inputs give the same digests.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// epoch is the modification time of every entry.
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

type entry struct {
	path   string // absolute path inside the image, cleaned
	kind   byte   // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	mode   int64
	data   []byte
	target string
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	var adds, links, dirs, envs, layerFiles list
	out := flag.String("o", "", "output tar (required)")
	name := flag.String("name", "", "image name, such as rt.local/app:1 (required)")
	entrypoint := flag.String("entrypoint", "", `entrypoint as a JSON list, such as '["/pause"]'`)
	rootfs := flag.String("rootfs", "", "also write the file tree into this directory")
	flag.Var(&adds, "add", "DST=SRC: copy file SRC to DST, keeping its permission bits (repeatable)")
	flag.Var(&links, "link", "DST=TARGET: symbolic link (repeatable)")
	flag.Var(&dirs, "dir", "DST: empty directory (repeatable)")
	flag.Var(&envs, "env", "K=V: environment of the image config (repeatable)")
	flag.Var(&layerFiles, "layer", "TAR: a layer, before the one of -add, -link and -dir (repeatable, in order)")
	command := flag.String("cmd", "", `command (the entrypoint's arguments) as a JSON list, such as '["pause"]'`)
	flag.Parse()
	if *out == "" || *name == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	var ep, cmd []string
	for _, f := range []struct {
		name, v string
		to      *[]string
	}{{"entrypoint", *entrypoint, &ep}, {"cmd", *command, &cmd}} {
		if f.v != "" {
			if err := json.Unmarshal([]byte(f.v), f.to); err != nil {
				log.Fatalf("-%s %q: %v", f.name, f.v, err)
			}
		}
	}
	tree := map[string]*entry{}
	put := func(e *entry) {
		e.path = path.Clean("/" + e.path)
		for d := path.Dir(e.path); d != "/"; d = path.Dir(d) {
			if _, ok := tree[d]; !ok {
				tree[d] = &entry{path: d, kind: tar.TypeDir, mode: 0o755}
			}
		}
		tree[e.path] = e
	}
	for _, a := range adds {
		dst, src, ok := strings.Cut(a, "=")
		if !ok {
			log.Fatalf("-add %q: want DST=SRC", a)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			log.Fatal(err)
		}
		st, err := os.Stat(src)
		if err != nil {
			log.Fatal(err)
		}
		put(&entry{path: dst, kind: tar.TypeReg, mode: int64(st.Mode().Perm()), data: data})
	}
	for _, l := range links {
		dst, target, ok := strings.Cut(l, "=")
		if !ok {
			log.Fatalf("-link %q: want DST=TARGET", l)
		}
		put(&entry{path: dst, kind: tar.TypeSymlink, mode: 0o777, target: target})
	}
	for _, d := range dirs {
		put(&entry{path: d, kind: tar.TypeDir, mode: 0o755})
	}
	entries := make([]*entry, 0, len(tree))
	for _, e := range tree {
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })

	var layers []layer
	for _, f := range layerFiles {
		l, err := fileLayer(f)
		if err != nil {
			log.Fatal(err)
		}
		layers = append(layers, l)
	}
	if len(entries) > 0 || len(layers) == 0 {
		b, err := layerTar(entries)
		if err != nil {
			log.Fatal(err)
		}
		layers = append(layers, layer{data: b, digest: digest(b), size: int64(len(b))})
	}
	if err := writeImage(*out, *name, layers, ep, cmd, envs); err != nil {
		log.Fatal(err)
	}
	if *rootfs != "" {
		if err := writeTree(*rootfs, entries); err != nil {
			log.Fatal(err)
		}
	}
}

func layerTar(entries []*entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: strings.TrimPrefix(e.path, "/"), Typeflag: e.kind, Mode: e.mode,
			ModTime: epoch, Format: tar.FormatPAX, Linkname: e.target}
		switch e.kind {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeReg:
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if e.kind == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// A layer is one layer's tar, uncompressed (its digest is its diff ID):
// in memory (the file tree's) or a file (-layer), streamed.
type layer struct {
	data   []byte
	file   string
	digest string
	size   int64
}

func fileLayer(p string) (layer, error) {
	f, err := os.Open(p)
	if err != nil {
		return layer{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return layer{}, fmt.Errorf("-layer %s: %w", p, err)
	}
	return layer{file: p, digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), size: n}, nil
}

func (l layer) writeTo(w io.Writer) error {
	if l.file == "" {
		_, err := w.Write(l.data)
		return err
	}
	f, err := os.Open(l.file)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, f)
	if err == nil && n != l.size {
		err = fmt.Errorf("-layer %s changed while it was written", l.file)
	}
	return err
}

// writeImage writes oci-layout, index.json and the blobs (the layers, the
// config, the manifest) as a tar.
func writeImage(out, name string, layers []layer, entrypoint, cmd, env []string) error {
	config := map[string]any{"Entrypoint": entrypoint, "Env": env, "WorkingDir": "/"}
	if cmd != nil {
		config["Cmd"] = cmd
	}
	var diffIDs []string
	var descs []descriptor
	for _, l := range layers {
		diffIDs = append(diffIDs, l.digest)
		descs = append(descs, descriptor{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: l.digest, Size: l.size})
	}
	cfg := map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       config,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": diffIDs},
		"created":      epoch.Format(time.RFC3339),
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digest(cfgJSON), Size: int64(len(cfgJSON))},
		"layers":        descs,
	})
	if err != nil {
		return err
	}
	ref := name
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		ref = name[i+1:]
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []descriptor{{
			MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: digest(manifest), Size: int64(len(manifest)),
			Annotations: map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": ref},
			Platform:    map[string]string{"architecture": runtime.GOARCH, "os": "linux"},
		}},
	})
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // (gone by then when it was renamed)
	tw := tar.NewWriter(f)
	add := func(name string, size int64, write func(io.Writer) error) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		return write(tw)
	}
	bytesOf := func(b []byte) func(io.Writer) error {
		return func(w io.Writer) error { _, err := w.Write(b); return err }
	}
	blob := func(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }
	layout := []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if err := add("oci-layout", int64(len(layout)), bytesOf(layout)); err != nil {
		return err
	}
	if err := add("index.json", int64(len(index)), bytesOf(index)); err != nil {
		return err
	}
	written := map[string]bool{}
	for _, l := range layers {
		if written[l.digest] {
			continue // (the same tar twice: one blob)
		}
		written[l.digest] = true
		if err := add(blob(l.digest), l.size, l.writeTo); err != nil {
			return err
		}
	}
	if err := add(blob(digest(cfgJSON)), int64(len(cfgJSON)), bytesOf(cfgJSON)); err != nil {
		return err
	}
	if err := add(blob(digest(manifest)), int64(len(manifest)), bytesOf(manifest)); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// writeTree writes the entries below dir, replacing what is there.
func writeTree(dir string, entries []*entry) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, filepath.FromSlash(e.path))
		switch e.kind {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(e.mode)); err != nil {
				return err
			}
		case tar.TypeSymlink:
			os.Remove(p)
			if err := os.Symlink(e.target, p); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := writeFile(p, e.data, os.FileMode(e.mode)); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeFile(p string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(p), ".ocitar-")
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, bytes.NewReader(data)); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), p); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", p, err)
	}
	return nil
}
