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
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

const digest = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// owned owns the images of snapshot(), with its commit TaskRun gone.
var owned = Ownership{Registry: "r.test/s"}

func snapshot(tag string) *v1alpha1.SandboxSnapshot {
	return &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "sb-pause", UID: "snap-uid"},
		Spec:       v1alpha1.SandboxSnapshotSpec{SandboxName: "sb"},
		Status: v1alpha1.SandboxSnapshotStatus{Containers: []v1alpha1.ContainerSnapshot{
			{ContainerName: "app", ImageURI: "r.test/s/team-a/sb/app:" + tag + "@" + digest, ImageDigest: digest},
			{ContainerName: "none", ImageURI: "r.test/s/team-a/sb/none:" + tag},
		}},
	}
}

// TestRecordRoundTrip makes the records of a snapshot, one per image it
// pushed, and reads back what they and the reconciler wrote.
func TestRecordRoundTrip(t *testing.T) {
	cms, refused, err := MakeRecords(snapshot("snap-gen3-x"), "sys", owned)
	if err != nil || len(cms) != 1 || len(refused) != 0 {
		t.Fatalf("MakeRecords() = %d records, refused %v, %v; want one, for the container that pushed", len(cms), refused, err)
	}
	cm := cms[0]
	if errs := validation.IsDNS1123Subdomain(cm.Name); len(errs) > 0 || cm.Namespace != "sys" || cm.Labels[RecordLabel] != "true" {
		t.Errorf("record %s/%s, labels %v: %v", cm.Namespace, cm.Name, cm.Labels, errs)
	}
	rec, err := ParseRecord(cm)
	if err != nil {
		t.Fatal(err)
	}
	want := Record{Image: "r.test/s/team-a/sb/app:snap-gen3-x@" + digest, Snapshot: types.NamespacedName{Namespace: "team-a", Name: "sb-pause"},
		UID: "snap-uid", Sandbox: "sb"}
	if *rec != want {
		t.Errorf("ParseRecord() = %+v, want %+v", *rec, want)
	}
	rec.WaitingFor, rec.FailingSince, rec.LastError = "pod team-a/sb-0", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "503"
	back, err := ParseRecord(rec.Apply(cm))
	if err != nil || *back != *rec {
		t.Errorf("ParseRecord(Apply()) = %+v, %v; want %+v", back, err, rec)
	}
	if _, err := ParseRecord(cm); err != nil || cm.Data[keyWaitingFor] != "" {
		t.Error("Apply changed the ConfigMap it was given")
	}
}

// TestRecordNames names one record per image and snapshot, whatever tag
// the image was pushed under.
func TestRecordNames(t *testing.T) {
	a, _, _ := MakeRecords(snapshot("snap-gen3-x"), "sys", owned)
	b, _, _ := MakeRecords(snapshot("snap-0123"), "sys", owned)
	if a[0].Name != b[0].Name {
		t.Errorf("records %s and %s of one snapshot's manifest", a[0].Name, b[0].Name)
	}
	other := snapshot("snap-gen3-x")
	other.UID = "other-uid"
	if c, _, _ := MakeRecords(other, "sys", owned); c[0].Name == a[0].Name {
		t.Errorf("two snapshots' records of one manifest share name %s", c[0].Name)
	}
	if _, _, err := MakeRecords(snapshot("Bad Tag"), "sys", owned); err == nil || !strings.Contains(err.Error(), "SandboxSnapshot team-a/sb-pause: status.containers[app]") {
		t.Errorf("MakeRecords(an invalid image) = %v, want an error naming the snapshot and container", err)
	}
}
