/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package squash

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
)

// memNode is a file of memFS; hardlinks share one.
type memNode struct {
	typ     byte
	mode    int64
	content string
	link    string
	xattrs  map[string]string
}

// memFS is a file system that layers are applied to as containerd's naive
// applier applies them: parents are created as needed, whiteouts remove a
// path and what it holds, an opaque directory loses what is in it but what
// the layer unpacked before its marker, a hardlink shares its target's node.
type memFS map[string]*memNode

// paxXattr is the PAX record prefix of extended attributes.
const paxXattr = "SCHILY.xattr."

func (fs memFS) apply(t *testing.T, layer []byte) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(layer))
	created := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := oci.CleanTarName(hdr.Name)
		base, dir := path.Base(name), path.Dir(name)
		// Parents first, whiteouts too, as containerd's mkparent.
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if n, ok := fs[p]; !ok {
				fs[p] = &memNode{typ: tar.TypeDir, mode: 0o755, xattrs: map[string]string{}}
			} else if n.typ != tar.TypeDir {
				t.Fatalf("%s is under %s, a file: no layer containerd applies", name, p)
			}
		}
		switch {
		case base == oci.WhiteoutOpaque:
			// As containerd's applier: what is under dir and not unpacked by
			// this layer so far goes, there and then.
			for p := range fs {
				if strings.HasPrefix(p, dir+"/") && !created[p] {
					delete(fs, p)
				}
			}
			continue
		case strings.HasPrefix(base, oci.WhiteoutPrefix):
			fs.remove(path.Join(dir, strings.TrimPrefix(base, oci.WhiteoutPrefix)))
			continue
		}
		created[name] = true
		switch hdr.Typeflag {
		case tar.TypeLink:
			target, ok := fs[oci.CleanTarName(hdr.Linkname)]
			if !ok {
				t.Fatalf("hardlink %s to missing %s", name, hdr.Linkname)
			}
			fs.remove(name)
			fs[name] = target
		case tar.TypeDir:
			if n, ok := fs[name]; ok && n.typ == tar.TypeDir {
				n.mode, n.xattrs = hdr.Mode, xattrsOf(hdr)
				continue
			}
			fs.remove(name)
			fs[name] = &memNode{typ: tar.TypeDir, mode: hdr.Mode, xattrs: xattrsOf(hdr)}
		default:
			b, _ := io.ReadAll(tr)
			fs.remove(name)
			fs[name] = &memNode{typ: hdr.Typeflag, mode: hdr.Mode, content: string(b), link: hdr.Linkname, xattrs: xattrsOf(hdr)}
		}
	}
}

// parentsAreDirs reports whether nothing above p is a file.
func (fs memFS) parentsAreDirs(p string) bool {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if n, ok := fs[d]; ok && n.typ != tar.TypeDir {
			return false
		}
	}
	return true
}

func (fs memFS) remove(name string) {
	for p := range fs {
		if p == name || strings.HasPrefix(p, name+"/") {
			delete(fs, p)
		}
	}
}

func xattrsOf(hdr *tar.Header) map[string]string {
	out := map[string]string{}
	for k, v := range hdr.PAXRecords {
		if strings.HasPrefix(k, paxXattr) {
			out[k] = v
		}
	}
	return out
}

// String lists the file system, hardlinks as groups of names.
func (fs memFS) String() string {
	ids := map[*memNode]string{}
	var names []string
	for p := range fs {
		names = append(names, p)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, p := range names {
		n := fs[p]
		if _, ok := ids[n]; !ok {
			ids[n] = p
		}
		fmt.Fprintf(&b, "%s %c %o %q %q %v inode-of:%s\n", p, n.typ, n.mode, n.content, n.link, n.xattrs, ids[n])
	}
	return b.String()
}

// layer builds a tar from entries: "d name", "f name content", "l name
// target" (hardlink), "s name target" (symlink), "w name" (whiteout), "o
// dir" (opaque), "x name content key=value" (a file with an xattr).
func layer(t *testing.T, entries ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		f := strings.SplitN(e, " ", 4)
		hdr := &tar.Header{Name: f[1], Mode: 0o644, Format: tar.FormatPAX}
		switch f[0] {
		case "d":
			hdr.Typeflag, hdr.Mode, hdr.Name = tar.TypeDir, 0o755, f[1]+"/"
		case "f", "x":
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f[2]))
			if f[0] == "x" {
				k, v, _ := strings.Cut(f[3], "=")
				hdr.PAXRecords = map[string]string{paxXattr + k: v}
			}
		case "l":
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, f[2]
		case "s":
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, f[2]
		case "w":
			hdr.Typeflag, hdr.Name = tar.TypeReg, path.Join(path.Dir(f[1]), oci.WhiteoutPrefix+path.Base(f[1]))
		case "o":
			hdr.Typeflag, hdr.Name = tar.TypeReg, path.Join(f[1], oci.WhiteoutOpaque)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			io.WriteString(tw, f[2])
		}
	}
	tw.Close()
	return buf.Bytes()
}

// TestSquashLayersEquivalence applies a chain of layers on a base, and the
// same base with the chain squashed: the file systems must be the same.
func TestSquashLayersEquivalence(t *testing.T) {
	base := layer(t, "d etc", "f etc/os base-os", "f etc/gone base", "d usr", "d usr/lib", "f usr/lib/a base-a",
		"f usr/lib/b base-b", "d opt", "f opt/keep base-keep", "s usr/lib/link a", "d var", "d var/cache", "f var/cache/x base-x")
	for _, tc := range []struct {
		name  string
		chain [][]string
	}{
		{"added then changed", [][]string{{"d data", "f data/one v1"}, {"f data/one v2"}}},
		{"a base file removed stays removed", [][]string{{"d etc", "w etc/gone"}, {"f data v"}}},
		{"a file added then removed is absent", [][]string{{"f tmpfile x"}, {"w tmpfile"}}},
		{"a removed file added again", [][]string{{"w opt/keep"}, {"d opt", "f opt/keep again"}}},
		{"a directory replaced hides the base's and the lower layers' children", [][]string{
			{"d usr", "d usr/lib", "f usr/lib/c layer1-c"},
			{"d usr", "d usr/lib", "o usr/lib", "f usr/lib/new fresh"},
		}},
		{"a replaced directory refilled above", [][]string{
			{"d var", "d var/cache", "o var/cache", "f var/cache/y y1"},
			{"d var", "d var/cache", "f var/cache/z z2"},
		}},
		{"a directory removed then created again", [][]string{{"w var"}, {"d var", "f var/new n"}}},
		{"a hardlink whose target is changed above keeps the old content", [][]string{
			{"d h", "f h/a one", "l h/b h/a"},
			{"d h", "f h/a two"},
		}},
		{"a hardlink whose target is removed above keeps the content", [][]string{
			{"d h", "f h/a one", "l h/b h/a", "l h/c h/a"},
			{"w h/a"},
		}},
		{"a hardlink kept with its target", [][]string{{"d h", "f h/a one", "l h/b h/a"}, {"f other x"}}},
		{"xattrs of the topmost layer", [][]string{
			{"x bin-tool v1 security.capability=cap1"},
			{"x bin-tool v2 security.capability=cap2"},
		}},
		{"symlinks replaced", [][]string{{"s usr/lib/link b"}, {"w usr/lib/b"}, {"d usr", "d usr/lib", "f usr/lib/link now-a-file"}}},
		{"many layers", [][]string{
			{"d w", "f w/1 a"}, {"f w/1 b", "f w/2 c"}, {"w w/1"}, {"d w", "o w", "f w/3 d"}, {"f w/4 e"}, {"w w/3"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, got := memFS{}, memFS{}
			want.apply(t, base)
			got.apply(t, base)
			var sources []Source
			for _, l := range tc.chain {
				b := layer(t, l...)
				want.apply(t, b)
				sources = append(sources, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
			}
			var squashed bytes.Buffer
			if err := Layers(sources, t.TempDir(), &squashed); err != nil {
				t.Fatal(err)
			}
			got.apply(t, squashed.Bytes())
			if want.String() != got.String() {
				t.Errorf("squashed chain differs:\nwant\n%s\ngot\n%s\nsquashed layer:\n%s", want, got, tarListing(t, squashed.Bytes()))
			}
		})
	}
}

// TestSquashLayersChecksDiffIDs squashes a layer whose bytes are not its
// diff ID: the squash fails, naming both, and a layer that is squashes.
func TestSquashLayersChecksDiffIDs(t *testing.T) {
	b := layer(t, "d data", "f data/one v1")
	source := func(diffID digest.Digest) Source {
		return func() (io.ReadCloser, error) {
			r := io.NopCloser(bytes.NewReader(b))
			return Verified(r, diffID, r), nil
		}
	}
	top := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer(t, "f other x"))), nil }
	if err := Layers([]Source{source(digest.FromBytes(b)), top}, t.TempDir(), io.Discard); err != nil {
		t.Errorf("a layer matching its diff ID: %v", err)
	}
	wrong := digest.FromString("another layer")
	err := Layers([]Source{source(wrong), top}, t.TempDir(), io.Discard)
	if err == nil || !strings.Contains(err.Error(), wrong.String()) || !strings.Contains(err.Error(), digest.FromBytes(b).String()) {
		t.Errorf("a layer not matching its diff ID: error %v, want one naming %s and %s", err, wrong, digest.FromBytes(b))
	}
}

func tarListing(t *testing.T, b []byte) string {
	t.Helper()
	var out strings.Builder
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		fmt.Fprintf(&out, "%c %s %s\n", hdr.Typeflag, hdr.Name, hdr.Linkname)
	}
	return out.String()
}

// TestSquashLayersRandomChains squashes random chains of layers over a few
// paths, with every kind of entry, and checks each against applying the
// chain layer by layer. Each layer is one containerd could apply to the
// file system below it: parents first, nothing under a file.
func TestSquashLayersRandomChains(t *testing.T) {
	paths := []string{"a", "a/b", "a/b/c", "a/d", "e", "e/f", "g"}
	base := layer(t, "d a", "d a/b", "f a/b/c base-c", "f a/d base-d", "d e", "f e/f base-f", "f g base-g")
	for seed := range 500 {
		rnd := newRand(uint64(seed))
		want, got := memFS{}, memFS{}
		want.apply(t, base)
		got.apply(t, base)
		var chain [][]string
		var sources []Source
		for l := range 1 + rnd.intn(6) {
			var entries, links []string
			// isDir says, of each path this layer has, whether it is a
			// directory: nothing goes under a non-directory.
			isDir := map[string]bool{}
			var files []string
			for range 1 + rnd.intn(5) {
				p, op := paths[rnd.intn(len(paths))], rnd.intn(6)
				dir := op == 0 || op == 3
				if _, ok := isDir[p]; ok || conflicts(isDir, p, dir) || !want.parentsAreDirs(p) {
					continue
				}
				switch op {
				case 0:
					entries = append(entries, "d "+p)
				case 1:
					entries = append(entries, fmt.Sprintf("f %s l%d-%s", p, l, p))
					files = append(files, p)
				case 2:
					entries = append(entries, "w "+p)
				case 3:
					entries = append(entries, "d "+p, "o "+p)
				case 4:
					if len(files) == 0 {
						continue
					}
					links = append(links, "l "+p+" "+files[rnd.intn(len(files))])
				case 5:
					entries = append(entries, fmt.Sprintf("x %s l%d security.capability=c%d", p, l, l))
					files = append(files, p)
				}
				isDir[p] = dir
			}
			sort.SliceStable(entries, func(i, j int) bool { return strings.Fields(entries[i])[1] < strings.Fields(entries[j])[1] })
			entries = append(entries, links...)
			chain = append(chain, entries)
			b := layer(t, entries...)
			want.apply(t, b)
			sources = append(sources, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		}
		var squashed bytes.Buffer
		if err := Layers(sources, t.TempDir(), &squashed); err != nil {
			t.Fatalf("seed %d: chain %q: %v", seed, chain, err)
		}
		got.apply(t, squashed.Bytes())
		if want.String() != got.String() {
			t.Fatalf("seed %d: chain %q\nwant\n%s\ngot\n%s\nsquashed layer:\n%s", seed, chain, want, got, tarListing(t, squashed.Bytes()))
		}
	}
}

// conflicts reports whether a path p (a directory or not) cannot join a
// layer holding the paths of isDir: one would be under a non-directory.
func conflicts(isDir map[string]bool, p string, dir bool) bool {
	for q, qDir := range isDir {
		if strings.HasPrefix(p, q+"/") && !qDir || strings.HasPrefix(q, p+"/") && !dir {
			return true
		}
	}
	return false
}

// splitmix is a small deterministic random source for the chains.
type splitmix struct{ s uint64 }

func newRand(seed uint64) *splitmix { return &splitmix{s: seed} }

func (r *splitmix) intn(n int) int {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return int((z ^ (z >> 31)) % uint64(n))
}
