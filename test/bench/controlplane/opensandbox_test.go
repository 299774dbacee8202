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

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCommitResult(t *testing.T) {
	image := "127.0.0.1:5000/snapshots/sb-0001-c0:snap-1"
	sum := sha256.Sum256([]byte(image))
	msg, err := commitResult([]string{"sb-0001-0", "bench-20", "c0:" + image, "c1:r/x:y"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(msg, "}\n") {
		t.Errorf("message %q: want the file image-committer writes, ending in a newline", msg)
	}
	// As OpenSandbox's getCommitJobResult reads it.
	var got struct {
		Containers []struct{ Name, Image, Digest string } `json:"containers"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(msg)), &got); err != nil {
		t.Fatal(err)
	}
	want := []struct{ Name, Image, Digest string }{
		{Name: "c0", Image: image, Digest: "sha256:" + hex.EncodeToString(sum[:])},
		{Name: "c1", Image: "r/x:y", Digest: got.Containers[1].Digest},
	}
	if diff := cmp.Diff(want, got.Containers); diff != "" {
		t.Errorf("commitResult (-want +got):\n%s", diff)
	}
	if len(got.Containers[1].Digest) != len("sha256:")+64 {
		t.Errorf("digest %q: want sha256:<64 hex>", got.Containers[1].Digest)
	}
}

func TestCommitResultBadArgs(t *testing.T) {
	for _, args := range [][]string{nil, {"pod", "ns"}, {"pod", "ns", "noimage"}, {"pod", "ns", ":image"}, {"pod", "ns", "c:"}} {
		if _, err := commitResult(args); err == nil {
			t.Errorf("commitResult(%q): want an error", args)
		}
	}
}

func TestAttribute(t *testing.T) {
	requests := counts{
		{Verb: "POST", Group: "batch", Resource: "jobs", Code: "201"}:                                                    20,
		{Verb: "PUT", Group: "batch", Resource: "jobs", Subresource: "status", Code: "200"}:                              40,
		{Verb: "PUT", Group: "sandbox.opensandbox.io", Resource: "sandboxsnapshots", Code: "200"}:                        20,
		{Verb: "PUT", Group: "sandbox.opensandbox.io", Resource: "sandboxsnapshots", Code: "409"}:                        5,
		{Verb: "PATCH", Group: "sandbox.opensandbox.io", Resource: "batchsandboxes", Code: "200"}:                        1,
		{Verb: "POST", Resource: "pods", Code: "201"}:                                                                    20,
		{Verb: "PATCH", Resource: "pods", Subresource: "status", Code: "200"}:                                            20,
		{Verb: "POST", Resource: "events", Code: "201"}:                                                                  80,
		{Verb: "PUT", Group: "coordination.k8s.io", Resource: "leases", Code: "200"}:                                     3,
		{Verb: "GET", Group: "sandbox.opensandbox.io", Resource: "sandboxsnapshots", Code: "200"}:                        7,
		{Verb: "WATCH", Group: "sandbox.opensandbox.io", Resource: "sandboxsnapshots", Code: "200"}:                      1,
		{Verb: "LIST", Group: "coordination.k8s.io", Resource: "leases", Code: "200"}:                                    2,
		{Verb: "POST", Group: "events.k8s.io", Resource: "events", Subresource: "", Code: "201"}:                         2,
		{Verb: "PATCH", Group: "sandbox.opensandbox.io", Resource: "sandboxsnapshots", Code: "200"}:                      20,
		{Verb: "PUT", Group: "sandbox.opensandbox.io", Resource: "sandboxsnapshots", Subresource: "status", Code: "200"}: 60,
	}
	var res result
	res.attribute(requests, 40)
	want := result{ObjectWrites: 20 + 20 + 5 + 1 + 20 + 60, Events: 80 - 40, JobWrites: 40 + 20 + 20 + 2 + 40, Conflicts: 5, Background: 3, Reads: 7}
	got := result{ObjectWrites: res.ObjectWrites, Events: res.Events, JobWrites: res.JobWrites, Conflicts: res.Conflicts, Background: res.Background, Reads: res.Reads}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(result{})); diff != "" {
		t.Errorf("attribute (-want +got):\n%s", diff)
	}
}
