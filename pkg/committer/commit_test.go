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

package committer

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
)

func TestAppendLayerToConfigKeepsUnknownFields(t *testing.T) {
	in := `{"architecture":"amd64","os":"linux","container_config":{"Hostname":"x"},"config":{"Env":["PATH=/bin"]},
		"rootfs":{"type":"layers","diff_ids":["sha256:` + zeros() + `"]},"history":[{"created_by":"base"}]}`
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal([]byte(in), &cfg); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := digest.FromString("layer")
	out, err := appendLayerToConfig(cfg, 0, d, now, "sandbox-commit pod a/b container c")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		ContainerConfig map[string]any `json:"container_config"`
		Created         time.Time      `json:"created"`
		RootFS          struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
		History []struct {
			CreatedBy string `json:"created_by"`
			Comment   string `json:"comment"`
		} `json:"history"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got.ContainerConfig["Hostname"] != "x" || !got.Created.Equal(now) {
		t.Errorf("lost fields: %s", out)
	}
	if len(got.RootFS.DiffIDs) != 2 || got.RootFS.DiffIDs[1] != d.String() {
		t.Errorf("diff_ids %v", got.RootFS.DiffIDs)
	}
	if len(got.History) != 2 || got.History[1].CreatedBy != "sandbox-commit pod a/b container c" || got.History[1].Comment != historyComment {
		t.Errorf("history %+v", got.History)
	}
}

// A commit on top of earlier ones counts them from the history's end, and
// one that squashes them leaves the base's diff IDs and history and its own.
func TestOwnLayersAndSquashedConfig(t *testing.T) {
	d := func(s string) string { return `"` + digest.FromString(s).String() + `"` }
	ours := `{"created_by":"sandbox-commit pod a/b container c","comment":"` + historyComment + `"}`
	in := `{"os":"linux","rootfs":{"type":"layers","diff_ids":[` + d("b1") + `,` + d("b2") + `,` + d("o1") + `,` + d("o2") + `,` + d("o3") + `]},
		"history":[{"created_by":"ADD b1"},{"created_by":"ENV x","empty_layer":true},{"created_by":"ADD b2"},` + ours + `,` + ours + `,` + ours + `]}`
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal([]byte(in), &cfg); err != nil {
		t.Fatal(err)
	}
	if got := ownLayers(cfg, 5); got != 3 {
		t.Errorf("ownLayers = %d, want 3", got)
	}
	if got := ownLayers(cfg, 6); got != 0 {
		t.Errorf("ownLayers with a manifest of 6 layers = %d, want 0 (diff IDs do not match it)", got)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	out, err := appendLayerToConfig(cfg, 3, digest.FromString("sq"), now, "squashed")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
		History []struct {
			CreatedBy string `json:"created_by"`
		} `json:"history"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	wantIDs := []string{digest.FromString("b1").String(), digest.FromString("b2").String(), digest.FromString("sq").String()}
	if strings.Join(got.RootFS.DiffIDs, ",") != strings.Join(wantIDs, ",") {
		t.Errorf("diff_ids %v, want %v", got.RootFS.DiffIDs, wantIDs)
	}
	var hist []string
	for _, h := range got.History {
		hist = append(hist, h.CreatedBy)
	}
	if strings.Join(hist, "|") != "ADD b1|ENV x|ADD b2|squashed" {
		t.Errorf("history %q", hist)
	}
	var sq map[string]json.RawMessage
	if err := json.Unmarshal(out, &sq); err != nil {
		t.Fatal(err)
	}
	if got := ownLayers(sq, 3); got != 1 {
		t.Errorf("ownLayers after the squash = %d, want 1", got)
	}
	// Another tool's layer on top: nothing under it counts.
	var foreign map[string]json.RawMessage
	if err := json.Unmarshal([]byte(in), &foreign); err != nil {
		t.Fatal(err)
	}
	foreign["history"] = json.RawMessage(`[{"created_by":"ADD b1"},` + ours + `,` + ours + `,{"created_by":"RUN x"},` + ours + `]`)
	if got := ownLayers(foreign, 5); got != 1 {
		t.Errorf("ownLayers over a foreign layer = %d, want 1", got)
	}
	if _, err := appendLayerToConfig(foreign, 6, digest.FromString("sq"), now, "squashed"); err == nil {
		t.Error("squashing more layers than the config has: no error")
	}
}

func zeros() string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = '0'
	}
	return string(b)
}

// TestWriteLayer writes a layer compressed and as a plain tar: the
// descriptor names the bytes written, the diff ID and size the tar, and a
// plain tar's digest is its diff ID.
func TestWriteLayer(t *testing.T) {
	tarball := bytes.Repeat([]byte("a tar stream "), 100000)
	write := func(w io.Writer) error { _, err := w.Write(tarball); return err }
	for _, mediaType := range []string{ocispec.MediaTypeImageLayer, ocispec.MediaTypeImageLayerZstd, ocispec.MediaTypeImageLayerGzip} {
		t.Run(mediaType, func(t *testing.T) {
			var out bytes.Buffer
			desc, diffID, size, err := oci.WriteLayer(&out, write, mediaType)
			if err != nil {
				t.Fatal(err)
			}
			if desc.MediaType != mediaType || desc.Digest != digest.FromBytes(out.Bytes()) || desc.Size != int64(out.Len()) {
				t.Errorf("descriptor %+v, want %s of the %d bytes written, digest %s", desc, mediaType, out.Len(), digest.FromBytes(out.Bytes()))
			}
			if diffID != digest.FromBytes(tarball) || size != int64(len(tarball)) {
				t.Errorf("diff ID %s and size %d, want %s and %d", diffID, size, digest.FromBytes(tarball), len(tarball))
			}
			r, err := compression.DecompressStream(&out)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, tarball) {
				t.Errorf("the layer holds %d bytes (%v), want the %d of the tar", len(got), err, len(tarball))
			}
			if mediaType == ocispec.MediaTypeImageLayer && desc.Digest != diffID {
				t.Errorf("a plain tar's digest %s is not its diff ID %s", desc.Digest, diffID)
			}
		})
	}
}
