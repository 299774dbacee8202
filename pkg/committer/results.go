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
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// FormatError renders the ERROR result: the error on one line, truncated.
func FormatError(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > task.MaxErrorLength {
		s = s[:task.MaxErrorLength-3] + "..."
	}
	return s
}

// Pushed describes one image pushed by the push step.
type Pushed struct {
	Target task.Target
	// Digest is the manifest digest the registry reports.
	Digest string
}

// FormatDigests renders the DIGESTS result, in the containers param's order.
func FormatDigests(p []Pushed) string {
	d := make([]string, len(p))
	for i := range p {
		d[i] = p[i].Digest
	}
	return task.FormatDigests(d)
}

// FormatImages renders the IMAGES result: one "<repo>@<digest>" per line.
func FormatImages(p []Pushed) string {
	d := make([]string, len(p))
	for i := range p {
		d[i] = p[i].Target.Repository() + "@" + p[i].Digest
	}
	return strings.Join(d, "\n")
}

// FormatPauseWindow renders the PAUSE_WINDOW_MS result.
func FormatPauseWindow(ms int64) string {
	return strconv.FormatInt(ms, 10)
}

// WriteResult writes one result file; an empty path writes nothing.
func WriteResult(path, value string) error {
	if path == "" {
		return nil
	}
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("writing result to %s: %w", path, err)
	}
	return nil
}
