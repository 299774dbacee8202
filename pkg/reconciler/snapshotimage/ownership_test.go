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

package snapshotimage

import (
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
)

// TestOwnershipCheck: a snapshot of sandbox team-a/sb owns only the
// manifests of <registry>/team-a/sb/<container>, and, while its commit
// TaskRun is there, only those the TaskRun reported pushing.
func TestOwnershipCheck(t *testing.T) {
	const other = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	pushed := []name.Digest{name.MustParseReference("r.test/s/team-a/sb/app@" + digest).(name.Digest)}
	withTaskRun := Ownership{Registry: "r.test/s", TaskRun: "sys/team-a-sb-pause-123456-commit", Pushed: pushed}
	for _, tc := range []struct {
		name  string
		own   Ownership
		image string
		// want is part of the refusal, or empty for an image the snapshot owns.
		want string
	}{
		{"an image of the sandbox's repository, its TaskRun gone", owned, "r.test/s/team-a/sb/app:t@" + digest, ""},
		{"one its TaskRun reported pushing", withTaskRun, "r.test/s/team-a/sb/app@" + digest, ""},
		{"the registry's name as the registry normalizes it", Ownership{Registry: "docker.io/acme"}, "index.docker.io/acme/team-a/sb/app@" + digest, ""},
		{"another namespace's", owned, "r.test/s/team-b/sb/app@" + digest,
			"repository r.test/s/team-b/sb/app is not one of sandbox team-a/sb's, r.test/s/team-a/sb/<container>"},
		{"another sandbox's, whose name starts with this one's", owned, "r.test/s/team-a/sb-2/app@" + digest, "is not one of sandbox team-a/sb's"},
		{"one below a container's repository", owned, "r.test/s/team-a/sb/app/x@" + digest, "is not one of sandbox team-a/sb's"},
		{"one outside the registry", owned, "elsewhere.test/s/team-a/sb/app@" + digest, "is not one of sandbox team-a/sb's"},
		{"a digest its TaskRun did not report", withTaskRun, "r.test/s/team-a/sb/app@" + other,
			"TaskRun sys/team-a-sb-pause-123456-commit did not report pushing it"},
		{"a digest its TaskRun reported for another container", withTaskRun, "r.test/s/team-a/sb/sidecar@" + digest, "did not report pushing it"},
		{"a digest when its TaskRun reported none (it failed)", Ownership{Registry: "r.test/s", TaskRun: "sys/tr"}, "r.test/s/team-a/sb/app@" + digest,
			"did not report pushing it"},
		{"anything, with no registry configured", Ownership{}, "r.test/s/team-a/sb/app@" + digest, "config-snapshot has no registry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := name.NewDigest(tc.image)
			if err != nil {
				t.Fatal(err)
			}
			err = tc.own.Check(d, "team-a", "sb")
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Check(%s) = %v, want the snapshot's own", tc.image, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Check(%s) = %v, want a refusal containing %q", tc.image, err, tc.want)
			}
		})
	}
}

// TestMakeRecordsRefuses records the images a snapshot owns, and says why
// it refuses the other.
func TestMakeRecordsRefuses(t *testing.T) {
	s := snapshot("t")
	s.Status.Containers = append(s.Status.Containers, s.Status.Containers[0])
	s.Status.Containers[2].ContainerName, s.Status.Containers[2].ImageURI = "stolen", "r.test/s/team-b/sb/app:t@"+digest
	cms, refused, err := MakeRecords(s, "sys", owned)
	if err != nil || len(cms) != 1 || len(refused) != 1 {
		t.Fatalf("MakeRecords() = %d records, refused %v, %v; want one of each", len(cms), refused, err)
	}
	want := "SandboxSnapshot team-a/sb-pause: status.containers[stolen]: image r.test/s/team-b/sb/app@" + digest +
		" is not the snapshot's to delete: repository r.test/s/team-b/sb/app is not one of sandbox team-a/sb's, r.test/s/team-a/sb/<container>"
	if refused[0].Error() != want {
		t.Errorf("refused %q, want %q", refused[0], want)
	}
}
