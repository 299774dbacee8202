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
	"encoding/json"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
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
	out, err := appendLayerToConfig(cfg, d, now, "sandbox-commit pod a/b container c")
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

func zeros() string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = '0'
	}
	return string(b)
}
