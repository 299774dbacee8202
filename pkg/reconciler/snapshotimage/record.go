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

// Package snapshotimage holds what both reconcilers know of a snapshot's
// images: where they go (Tag, Repository, URI), which of them a deleted
// snapshot owns (Ownership), and the records of their deletion, one ConfigMap
// per image in the operator's namespace that lives until the image is deleted
// or left behind. Its functions are pure.
package snapshotimage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

// RecordLabel marks the ConfigMaps that record an image deletion.
const RecordLabel = sandbox.GroupName + "/image-deletion"

// Keys of a record's data.
const (
	keyImage       = "image"
	keySnapshot    = "snapshot"
	keySnapshotUID = "snapshotUID"
	keySandbox     = "sandbox"
	keyWaitingFor  = "waitingFor"
	keyFailing     = "failingSince"
	keyLastError   = "lastError"
)

// Record is an image to delete once nothing refers to it.
type Record struct {
	// Image is the image, <repository>:<tag>@<digest>.
	Image string
	// Snapshot is the deleted snapshot that recorded the image, and UID its
	// UID: events about the deletion name it.
	Snapshot types.NamespacedName
	UID      types.UID
	// Sandbox is the snapshot's sandbox, whose other snapshots may push to
	// the image's repository.
	Sandbox string
	// WaitingFor names what refers to the image, the last time it was looked
	// at; empty when nothing did.
	WaitingFor string
	// FailingSince is when the registry first failed to delete the image,
	// and LastError what it answered; zero and empty when it has not failed.
	FailingSince time.Time
	LastError    string
}

// RecordName is the name of the record of an image of a snapshot: each
// deleted snapshot that recorded a manifest has its own record, and so its
// own events about it.
func RecordName(image name.Digest, snapshot types.UID) string {
	sum := sha256.Sum256([]byte(image.Name() + " " + string(snapshot)))
	return "image-deletion-" + hex.EncodeToString(sum[:])[:20]
}

// MakeRecords builds, in namespace, the records of the images a snapshot
// recorded that own says are its own; refused says why each other one is
// not deleted. opts parse the snapshot's images.
func MakeRecords(s *v1alpha1.SandboxSnapshot, namespace string, own Ownership, opts ...name.Option) (records []*corev1.ConfigMap, refused []error, err error) {
	for _, c := range s.Status.Containers {
		if c.ImageDigest == "" {
			continue
		}
		tagged, _, _ := strings.Cut(c.ImageURI, "@")
		pinned := tagged + "@" + c.ImageDigest
		d, err := name.NewDigest(pinned, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("SandboxSnapshot %s/%s: status.containers[%s]: image %q: %w", s.Namespace, s.Name, c.ContainerName, pinned, err)
		}
		if err := own.Check(d, s.Namespace, s.Spec.SandboxName, opts...); err != nil {
			refused = append(refused, fmt.Errorf("SandboxSnapshot %s/%s: status.containers[%s]: image %s is not the snapshot's to delete: %w",
				s.Namespace, s.Name, c.ContainerName, d.Name(), err))
			continue
		}
		records = append(records, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:      RecordName(d, s.UID),
				Namespace: namespace,
				Labels: map[string]string{
					RecordLabel:            "true",
					sandbox.ManagedByLabel: sandbox.ManagedByValue,
				},
			},
			Data: map[string]string{
				keyImage:       pinned,
				keySnapshot:    s.Namespace + "/" + s.Name,
				keySnapshotUID: string(s.UID),
				keySandbox:     s.Spec.SandboxName,
			},
		})
	}
	return records, refused, nil
}

// ParseRecord reads a record.
func ParseRecord(cm *corev1.ConfigMap) (*Record, error) {
	ns, n, ok := strings.Cut(cm.Data[keySnapshot], "/")
	if !ok || cm.Data[keyImage] == "" || cm.Data[keySandbox] == "" {
		return nil, fmt.Errorf("ConfigMap %s/%s is not an image deletion record: it needs keys %q, %q (<namespace>/<name>) and %q",
			cm.Namespace, cm.Name, keyImage, keySnapshot, keySandbox)
	}
	r := &Record{
		Image:      cm.Data[keyImage],
		Snapshot:   types.NamespacedName{Namespace: ns, Name: n},
		UID:        types.UID(cm.Data[keySnapshotUID]),
		Sandbox:    cm.Data[keySandbox],
		WaitingFor: cm.Data[keyWaitingFor],
		LastError:  cm.Data[keyLastError],
	}
	if v := cm.Data[keyFailing]; v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: key %q: %w", cm.Namespace, cm.Name, keyFailing, err)
		}
		r.FailingSince = t
	}
	return r, nil
}

// SandboxKey returns the record's sandbox, in the snapshot's namespace.
func (r *Record) SandboxKey() types.NamespacedName {
	return types.NamespacedName{Namespace: r.Snapshot.Namespace, Name: r.Sandbox}
}

// Apply writes what the record reports into a copy of cm.
func (r *Record) Apply(cm *corev1.ConfigMap) *corev1.ConfigMap {
	cm = cm.DeepCopy()
	set := func(k, v string) {
		if v == "" {
			delete(cm.Data, k)
		} else {
			cm.Data[k] = v
		}
	}
	set(keyWaitingFor, r.WaitingFor)
	set(keyLastError, r.LastError)
	failing := ""
	if !r.FailingSince.IsZero() {
		failing = r.FailingSince.UTC().Format(time.RFC3339)
	}
	set(keyFailing, failing)
	return cm
}
