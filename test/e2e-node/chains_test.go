//go:build e2e_node

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

package e2enode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

const (
	// chainsNamespace is where test/cluster/chains.sh installs Tekton Chains.
	chainsNamespace = "tekton-chains"
	// chainsSigned is the annotation Chains sets on a TaskRun it has signed.
	chainsSigned = "chains.tekton.dev/signed"
	// chainsTimeout bounds the wait for Chains to sign a finished TaskRun.
	chainsTimeout = 2 * time.Minute

	// Cosign's layout in the image's repository (what `cosign verify` and
	// `cosign verify-attestation` read).
	simpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	cosignSignature        = "dev.cosignproject.cosign/signature"
	dsseMediaType          = "application/vnd.dsse.envelope.v1+json"
	inTotoPayloadType      = "application/vnd.in-toto+json"
	// slsaProvenanceV1 is the predicate of chains-config's artifacts.taskrun.format slsa/v2alpha4.
	slsaProvenanceV1 = "https://slsa.dev/provenance/v1"
)

// TestChainsSignsSnapshotImages snapshots a live two-container sandbox on a
// node where Tekton Chains runs unmodified, and checks, with the node's public
// key and nothing but the standard library and go-containerregistry, that
// Chains signed every image the commit TaskRun's IMAGES result names: a
// simplesigning signature (sha256-<hex>.sig) for the image's manifest digest
// and a DSSE-signed SLSA provenance (sha256-<hex>.att) whose subject is that
// digest. Neither verifies with another key.
func TestChainsSignsSnapshotImages(t *testing.T) {
	pub := chainsPublicKey(t)
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ns := nodeframework.NewNamespace(t)
	pod := nodeframework.CreateSandbox(t, ns, "sb")
	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	s := nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseSucceed)
	if len(s.Status.Containers) != len(pod.Spec.Containers) || len(s.Status.Containers) < 2 {
		t.Fatalf("status.containers = %+v, want one per container of %s (%d)", s.Status.Containers, pod.Name, len(pod.Spec.Containers))
	}

	succeeded := time.Now()
	tr := waitForChains(t, names.CommitTaskRun(s))
	t.Logf("Chains marked TaskRun %s signed %s after the snapshot was seen Succeed", tr.Name, time.Since(succeeded).Round(100*time.Millisecond))
	images := imagesResult(t, tr)
	if len(images) != len(s.Status.Containers) {
		t.Errorf("IMAGES of TaskRun %s names %d images %v, want one per container (%d)", tr.Name, len(images), images, len(s.Status.Containers))
	}

	for _, cs := range s.Status.Containers {
		ref, err := name.ParseReference(cs.ImageURI, name.Insecure)
		if err != nil {
			t.Fatalf("container %s: imageUri %q: %v", cs.ContainerName, cs.ImageURI, err)
		}
		repo := ref.Context()
		if want := repo.Name() + "@" + cs.ImageDigest; !slices.Contains(images, want) {
			t.Errorf("container %s: IMAGES %v lacks %s", cs.ContainerName, images, want)
		}

		sig := fetchSignature(t, repo, cs.ImageDigest)
		if err := sig.verify(pub, repo.Name(), cs.ImageDigest); err != nil {
			t.Errorf("container %s: signature of %s@%s: %v", cs.ContainerName, repo.Name(), cs.ImageDigest, err)
		}
		if err := sig.verify(&other.PublicKey, repo.Name(), cs.ImageDigest); err == nil {
			t.Errorf("container %s: signature of %s@%s verifies with a key Chains does not hold", cs.ContainerName, repo.Name(), cs.ImageDigest)
		}

		att := fetchAttestation(t, repo, cs.ImageDigest)
		if err := att.verify(pub, repo.Name(), cs.ImageDigest, string(tr.UID)); err != nil {
			t.Errorf("container %s: attestation of %s@%s: %v", cs.ContainerName, repo.Name(), cs.ImageDigest, err)
		}
		if err := att.verify(&other.PublicKey, repo.Name(), cs.ImageDigest, string(tr.UID)); err == nil {
			t.Errorf("container %s: attestation of %s@%s verifies with a key Chains does not hold", cs.ContainerName, repo.Name(), cs.ImageDigest)
		}
	}
}

// chainsPublicKey reads the ECDSA public key test/cluster/chains.sh left for the test.
func chainsPublicKey(t *testing.T) *ecdsa.PublicKey {
	t.Helper()
	path := os.Getenv("CHAINS_PUBLIC_KEY")
	if path == "" {
		t.Fatal("CHAINS_PUBLIC_KEY is not set: test/cluster/node-up.sh installs Tekton Chains (test/cluster/chains.sh) unless SKIP_CHAINS=1; then source test/cluster/env.sh")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PUBLIC KEY" {
		t.Fatalf("%s holds no PEM public key", path)
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	pub, ok := k.(*ecdsa.PublicKey)
	if !ok {
		t.Fatalf("%s holds a %T, want an ECDSA public key", path, k)
	}
	return pub
}

// waitForChains waits until Chains has marked the TaskRun signed and returns it.
func waitForChains(t *testing.T, taskRun string) *pipelinev1.TaskRun {
	t.Helper()
	var tr *pipelinev1.TaskRun
	deadline := time.Now().Add(chainsTimeout)
	for {
		var err error
		tr, err = nodeframework.Clients().Pipeline.TektonV1().TaskRuns(test.SystemNamespace).Get(t.Context(), taskRun, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("TaskRun %s/%s: %v", test.SystemNamespace, taskRun, err)
		}
		state := tr.Annotations[chainsSigned]
		if state == "true" {
			return tr
		}
		if state == "failed" || time.Now().After(deadline) {
			logs, err := nodeframework.TryRun("", "kubectl", "-n", chainsNamespace, "logs", "deployment/tekton-chains-controller", "--tail=40")
			if err != nil {
				logs = fmt.Sprintf("(none: %v; is it running? kubectl -n %s get pods)", err, chainsNamespace)
			}
			t.Fatalf("Tekton Chains did not sign TaskRun %s/%s within %s (annotation %s=%q, %s=%q); "+
				"see `kubectl -n %s logs deployment/tekton-chains-controller`, last lines:\n%s",
				test.SystemNamespace, taskRun, chainsTimeout, chainsSigned, state,
				"chains.tekton.dev/retries", tr.Annotations["chains.tekton.dev/retries"], chainsNamespace, logs)
		}
		time.Sleep(time.Second)
	}
}

// imagesResult returns the lines of the TaskRun's IMAGES result.
func imagesResult(t *testing.T, tr *pipelinev1.TaskRun) []string {
	t.Helper()
	for _, r := range tr.Status.Results {
		if r.Name == task.ResultImages {
			return strings.Fields(r.Value.StringVal)
		}
	}
	t.Fatalf("TaskRun %s has no %s result: %+v", tr.Name, task.ResultImages, tr.Status.Results)
	return nil
}

// cosignLayers fetches the image that cosign keeps beside digest under the
// tag sha256-<hex>.<suffix> and returns its layers of mediaType, with their
// annotations.
func cosignLayers(t *testing.T, repo name.Repository, digest, suffix, mediaType string) []cosignLayer {
	t.Helper()
	tag := repo.Tag(strings.Replace(digest, ":", "-", 1) + "." + suffix)
	img, err := remote.Image(tag, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("fetching %s: %v", tag, err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var layers []cosignLayer
	for _, d := range m.Layers {
		if string(d.MediaType) != mediaType {
			continue
		}
		body, err := readLayer(img, d)
		if err != nil {
			t.Fatalf("reading layer %s of %s: %v", d.Digest, tag, err)
		}
		layers = append(layers, cosignLayer{body: body, annotations: d.Annotations})
	}
	if len(layers) == 0 {
		t.Fatalf("%s has no %s layer: %+v", tag, mediaType, m.Layers)
	}
	return layers
}

// cosignLayer is one layer of a cosign signature or attestation image.
type cosignLayer struct {
	body        []byte
	annotations map[string]string
}

func readLayer(img v1.Image, d v1.Descriptor) ([]byte, error) {
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed() // cosign's layers are stored as they are, not compressed
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// signatures are the simplesigning layers of an image's .sig.
type signatures []cosignLayer

func fetchSignature(t *testing.T, repo name.Repository, digest string) signatures {
	t.Helper()
	return cosignLayers(t, repo, digest, "sig", simpleSigningMediaType)
}

// simpleSigning is the part of a simplesigning payload that binds it to an image.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
}

// verify succeeds when one layer's payload names repo@digest and its
// signature verifies with pub, as `cosign verify --key` checks.
func (s signatures) verify(pub *ecdsa.PublicKey, repo, digest string) error {
	var errs []error
	for _, l := range s {
		errs = append(errs, verifySimpleSigning(pub, l, repo, digest))
		if errs[len(errs)-1] == nil {
			return nil
		}
	}
	return errors.Join(errs...)
}

func verifySimpleSigning(pub *ecdsa.PublicKey, l cosignLayer, repo, digest string) error {
	var p simpleSigning
	if err := json.Unmarshal(l.body, &p); err != nil {
		return fmt.Errorf("simplesigning payload: %w", err)
	}
	if p.Critical.Image.DockerManifestDigest != digest || p.Critical.Identity.DockerReference != repo {
		return fmt.Errorf("payload signs %s@%s, want %s@%s", p.Critical.Identity.DockerReference, p.Critical.Image.DockerManifestDigest, repo, digest)
	}
	sig, err := base64.StdEncoding.DecodeString(l.annotations[cosignSignature])
	if err != nil || len(sig) == 0 {
		return fmt.Errorf("annotation %s = %q: no base64 signature", cosignSignature, l.annotations[cosignSignature])
	}
	h := sha256.Sum256(l.body)
	if !ecdsa.VerifyASN1(pub, h[:], sig) {
		return errors.New("the ECDSA signature over the payload does not verify")
	}
	return nil
}

// attestations are the DSSE envelopes of an image's .att.
type attestations []cosignLayer

func fetchAttestation(t *testing.T, repo name.Repository, digest string) attestations {
	t.Helper()
	return cosignLayers(t, repo, digest, "att", dsseMediaType)
}

// envelope is a DSSE envelope.
type envelope struct {
	PayloadType string `json:"payloadType"`
	Payload     string `json:"payload"`
	Signatures  []struct {
		Sig string `json:"sig"`
	} `json:"signatures"`
}

// statement is the part of an in-toto statement with SLSA v1 provenance the test checks.
type statement struct {
	Subject []struct {
		Name   string            `json:"name"`
		Digest map[string]string `json:"digest"`
	} `json:"subject"`
	PredicateType string `json:"predicateType"`
	Predicate     struct {
		RunDetails struct {
			Metadata struct {
				InvocationID string `json:"invocationId"`
			} `json:"metadata"`
		} `json:"runDetails"`
	} `json:"predicate"`
}

// verify succeeds when one envelope is signed with pub over its
// pre-authentication encoding and holds SLSA provenance of the TaskRun
// invocationID whose subjects include repo@digest, as `cosign
// verify-attestation --key --type slsaprovenance1` checks.
func (a attestations) verify(pub *ecdsa.PublicKey, repo, digest, invocationID string) error {
	var errs []error
	for _, l := range a {
		errs = append(errs, verifyAttestation(pub, l.body, repo, digest, invocationID))
		if errs[len(errs)-1] == nil {
			return nil
		}
	}
	return errors.Join(errs...)
}

func verifyAttestation(pub *ecdsa.PublicKey, body []byte, repo, digest, invocationID string) error {
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("DSSE envelope: %w", err)
	}
	if env.PayloadType != inTotoPayloadType {
		return fmt.Errorf("payloadType %q, want %q", env.PayloadType, inTotoPayloadType)
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return fmt.Errorf("DSSE payload: %w", err)
	}
	pae := fmt.Sprintf("DSSEv1 %d %s %d %s", len(env.PayloadType), env.PayloadType, len(payload), payload)
	h := sha256.Sum256([]byte(pae))
	verified := false
	for _, s := range env.Signatures {
		sig, err := base64.StdEncoding.DecodeString(s.Sig)
		if err == nil && ecdsa.VerifyASN1(pub, h[:], sig) {
			verified = true
			break
		}
	}
	if !verified {
		return fmt.Errorf("none of the %d DSSE signatures verifies", len(env.Signatures))
	}
	var st statement
	if err := json.Unmarshal(payload, &st); err != nil {
		return fmt.Errorf("in-toto statement: %w", err)
	}
	if st.PredicateType != slsaProvenanceV1 {
		return fmt.Errorf("predicateType %q, want %q", st.PredicateType, slsaProvenanceV1)
	}
	if st.Predicate.RunDetails.Metadata.InvocationID != invocationID {
		return fmt.Errorf("provenance of invocation %q, want TaskRun UID %q", st.Predicate.RunDetails.Metadata.InvocationID, invocationID)
	}
	hex := strings.TrimPrefix(digest, "sha256:")
	for _, sub := range st.Subject {
		if sub.Name == repo && sub.Digest["sha256"] == hex {
			return nil
		}
	}
	return fmt.Errorf("subjects %+v do not include %s@%s", st.Subject, repo, digest)
}
