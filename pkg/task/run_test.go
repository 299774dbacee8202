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

package task

import (
	"strings"
	"testing"
)

func validRaw() RawParams {
	return RawParams{
		PodName:          "sb1-0",
		PodNamespace:     "team-a",
		PodUID:           "0f4c1f4e-7d0a-4a51-9d3b-2f7e0c1a9b11",
		RunID:            "7244861d-0adf-4dbe-91a8-b976efd1365b",
		Containers:       []string{"app=127.0.0.1:5000/snap/sb1-app:snap-gen3", "sidecar=registry.example.com/snap/sb1-sidecar:snap-gen3"},
		InsecureRegistry: "false",
		Mode:             "commit",
	}
}

func TestParseParamsValid(t *testing.T) {
	p, err := ParseParams(validRaw())
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != ModeCommit || p.Insecure || len(p.Targets) != 2 || p.PodUID != validRaw().PodUID || p.RunID != validRaw().RunID {
		t.Fatalf("unexpected %+v", p)
	}
	if got := p.Targets[0].Repository(); got != "127.0.0.1:5000/snap/sb1-app" {
		t.Errorf("Repository() = %q", got)
	}
	if p.Targets[1].Container != "sidecar" || p.Targets[1].Image != "registry.example.com/snap/sb1-sidecar:snap-gen3" {
		t.Errorf("target %+v", p.Targets[1])
	}
	r := validRaw()
	r.TaskPodUID = "5d0c9e2a-1b7f-4c3e-9a60-7f1e2d3c4b5a"
	if p, err = ParseParams(r); err != nil || p.TaskPodUID != r.TaskPodUID {
		t.Errorf("task pod uid: %+v %v", p, err)
	}
	r.Mode, r.InsecureRegistry = "", "true"
	if p, err = ParseParams(r); err != nil || p.Mode != ModeCommit || !p.Insecure {
		t.Errorf("empty mode / insecure: %+v %v", p, err)
	}
	r.Mode = "unpause"
	if p, err = ParseParams(r); err != nil || p.Mode != ModeUnpause {
		t.Errorf("unpause: %+v %v", p, err)
	}
	// An unpause writes nothing its Task pod owns: it thaws whatever that
	// pod's UID reads.
	bad := r
	bad.TaskPodUID = "$(TASK_POD_UID)"
	if p, err = ParseParams(bad); err != nil || p.TaskPodUID != "" {
		t.Errorf("unpause with an unexpanded task pod uid: %+v %v", p, err)
	}
	r.Containers = nil
	if p, err = ParseParams(r); err != nil || len(p.Targets) != 0 {
		t.Errorf("unpause without containers: %+v %v", p, err)
	}
	// A release touches no container: the pod may be long gone, its UID
	// unknown.
	r.Mode, r.PodUID = "release", ""
	if p, err = ParseParams(r); err != nil || p.Mode != ModeRelease {
		t.Errorf("release without containers and pod UID: %+v %v", p, err)
	}
}

func TestParseParamsInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*RawParams)
		want string
	}{
		{"empty pod name", func(r *RawParams) { r.PodName = "" }, "pod-name is empty"},
		{"bad pod name", func(r *RawParams) { r.PodName = "Sb_1" }, "pod-name"},
		{"empty namespace", func(r *RawParams) { r.PodNamespace = "" }, "pod-namespace is empty"},
		{"bad namespace", func(r *RawParams) { r.PodNamespace = "a.b" }, "pod-namespace"},
		{"no containers", func(r *RawParams) { r.Containers = nil }, "containers is empty"},
		{"empty pod uid", func(r *RawParams) { r.PodUID = "" }, "pod-uid is empty"},
		{"empty pod uid, unpause", func(r *RawParams) { r.PodUID, r.Mode = "", "unpause" }, "pod-uid is empty"},
		{"bad pod uid, release", func(r *RawParams) { r.PodUID, r.Mode = "a/b", "release" }, "pod-uid"},
		{"unknown mode", func(r *RawParams) { r.Mode = "restore" }, `param mode must be "commit", "unpause" or "release"`},
		{"bad pod uid", func(r *RawParams) { r.PodUID = `x",labels.y=="z` }, "pod-uid"},
		{"long pod uid", func(r *RawParams) { r.PodUID = strings.Repeat("a", 129) }, "pod-uid is longer"},
		{"empty run id", func(r *RawParams) { r.RunID = "" }, "run-id is empty"},
		{"bad run id", func(r *RawParams) { r.RunID = "run/1" }, "run-id"},
		// Where Kubernetes did not expand the Task's $(TASK_POD_UID).
		{"bad task pod uid", func(r *RawParams) { r.TaskPodUID = "$(TASK_POD_UID)" }, "task-pod-uid"},
		{"no equals", func(r *RawParams) { r.Containers = []string{"app"} }, "<container>=<image>"},
		{"empty container name", func(r *RawParams) { r.Containers = []string{"=127.0.0.1:5000/a:b"} }, "empty container name"},
		{"bad container name", func(r *RawParams) { r.Containers = []string{"App=127.0.0.1:5000/a:b"} }, "container name is invalid"},
		{"empty image", func(r *RawParams) { r.Containers = []string{"app="} }, "image is empty"},
		{"no registry", func(r *RawParams) { r.Containers = []string{"app=snap/app:1"} }, "fully qualified"},
		{"no tag", func(r *RawParams) { r.Containers = []string{"app=127.0.0.1:5000/snap/app"} }, "fully qualified"},
		{"digest", func(r *RawParams) {
			r.Containers = []string{"app=127.0.0.1:5000/snap/app@sha256:" + strings.Repeat("a", 64)}
		}, "not a digest"},
		{"tag and digest", func(r *RawParams) {
			r.Containers = []string{"app=127.0.0.1:5000/snap/app:1@sha256:" + strings.Repeat("a", 64)}
		}, ""},
		{"upper case repo", func(r *RawParams) { r.Containers = []string{"app=127.0.0.1:5000/Snap/app:1"} }, "fully qualified"},
		{"space", func(r *RawParams) { r.Containers = []string{"app=127.0.0.1:5000/snap/app:1 "} }, "fully qualified"},
		{"duplicate container", func(r *RawParams) {
			r.Containers = []string{"app=127.0.0.1:5000/a:1", "app=127.0.0.1:5000/b:1"}
		}, "listed twice"},
		{"duplicate image", func(r *RawParams) {
			r.Containers = []string{"app=127.0.0.1:5000/a:1", "side=127.0.0.1:5000/a:1"}
		}, "both target repository 127.0.0.1:5000/a"},
		{"one repository, two tags", func(r *RawParams) {
			r.Containers = []string{"app=127.0.0.1:5000/a:1", "side=127.0.0.1:5000/a:2"}
		}, "both target repository 127.0.0.1:5000/a"},
		{"insecure yes", func(r *RawParams) { r.InsecureRegistry = "yes" }, "insecure-registry"},
		{"insecure empty", func(r *RawParams) { r.InsecureRegistry = "" }, "insecure-registry"},
		{"insecure True", func(r *RawParams) { r.InsecureRegistry = "True" }, "insecure-registry"},
		{"bad mode", func(r *RawParams) { r.Mode = "push" }, "param mode"},
		{"max-pause not positive", func(r *RawParams) { r.MaxPause = "0s" }, "param max-pause"},
		{"max-layers past its bound", func(r *RawParams) { r.MaxLayers = "129" }, "param max-layers"},
		{"keep-local not a boolean", func(r *RawParams) { r.KeepLocal = "yes" }, "param keep-local"},
		{"keep-local-max-size negative", func(r *RawParams) { r.KeepLocalMaxSize = "-1Gi" }, "param keep-local-max-size"},
		{"disk-reserve past half", func(r *RawParams) { r.DiskReserve = "60%" }, "param disk-reserve"},
		{"memory-restore-base by tag", func(r *RawParams) { r.MemoryRestoreBase = "registry.example.com/base:1" }, "param memory-restore-base"},
		{"memory-anonymous-pull unknown", func(r *RawParams) { r.MemoryAnonymousPull = "Yes" }, "param memory-anonymous-pull"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := validRaw()
			tc.mut(&r)
			_, err := ParseParams(r)
			if err == nil {
				t.Fatalf("accepted %+v", r)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// FuzzParseParams checks that the parser never panics and that whatever it
// accepts is well formed and round-trips.
func FuzzParseParams(f *testing.F) {
	f.Add("sb1-0", "default", "app=127.0.0.1:5000/snap/sb1-app:snap-gen3", "side=reg.example.com/a/b:c", "false", "commit")
	f.Add("p", "ns", "a=localhost:5000/x:y", "a=localhost:5000/x:z", "true", "unpause")
	f.Add("", "", "=", "x", "", "")
	f.Add("p", "ns", "a=127.0.0.1:5000/x@sha256:"+strings.Repeat("0", 64), "b=[::1]:5000/x:1", "true", "commit")
	f.Fuzz(func(t *testing.T, pod, ns, c1, c2, insecure, mode string) {
		p, err := ParseParams(RawParams{PodName: pod, PodNamespace: ns, PodUID: "uid-1", RunID: "run-1", Containers: []string{c1, c2}, InsecureRegistry: insecure, Mode: mode})
		if err != nil {
			return
		}
		if p.PodName == "" || p.PodNamespace == "" || len(p.Targets) != 2 {
			t.Fatalf("accepted incomplete params %+v", p)
		}
		if p.Targets[0].Container == p.Targets[1].Container {
			t.Fatalf("accepted duplicate container %q", p.Targets[0].Container)
		}
		for _, tg := range p.Targets {
			if tg.Container == "" || tg.Image == "" || strings.ContainsAny(tg.Image, "@ \n,") {
				t.Fatalf("accepted bad target %+v", tg)
			}
			again, err := ParseTarget(tg.Container+"="+tg.Image, p.Insecure)
			if err != nil || again.Image != tg.Image {
				t.Fatalf("target %+v does not round-trip: %v", tg, err)
			}
			if !strings.HasPrefix(tg.Image, tg.Repository()+":") {
				t.Fatalf("repository %q is not a prefix of %q", tg.Repository(), tg.Image)
			}
		}
	})
}
