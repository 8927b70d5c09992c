package apilookup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"istio-cni.local/istio-cni/pkg/kube"
)

// PodReader reads one pod from the API (apiclient.Client).
type PodReader interface {
	GetPod(ctx context.Context, namespace, name, uid string) (*kube.Pod, error)
}

// Serve is the helper's main: it reads the request from stdin, opens a
// reader with the kubeconfig and reads the pod, and writes one reply to
// stdout. It returns the exit status: 0 once a reply is written, 2 for a
// request it cannot use.
func Serve(stdin io.Reader, stdout, stderr io.Writer, open func(kubeconfig string, t kube.Timeouts) (PodReader, error)) int {
	var r Request
	dec := json.NewDecoder(io.LimitReader(stdin, 1<<16))
	dec.DisallowUnknownFields()
	err := dec.Decode(&r)
	if err == nil {
		err = r.validate()
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "%s: the request on stdin (JSON, from the istio-cni plugin): %v\n", Binary, err)
		return 2
	}
	rep := lookup(r, open)
	rep.V = wireVersion()
	if err := json.NewEncoder(stdout).Encode(rep); err != nil {
		_, _ = fmt.Fprintf(stderr, "%s: writing the reply: %v\n", Binary, err)
		return 1
	}
	return 0
}

func lookup(r Request, open func(string, kube.Timeouts) (PodReader, error)) reply {
	reader, err := open(r.Kubeconfig, r.Timeouts)
	if err != nil {
		return reply{Error: &replyError{Kind: configKind, Message: err.Error()}}
	}
	if r.Check {
		return reply{}
	}
	pod, err := reader.GetPod(context.Background(), r.Namespace, r.Name, r.UID)
	if err == nil {
		return reply{Pod: pod}
	}
	var apiErr *kube.APIError
	if !errors.As(err, &apiErr) {
		apiErr = &kube.APIError{Kind: kube.BadResponse, Pod: r.Namespace + "/" + r.Name, Err: err}
	}
	msg := ""
	if apiErr.Err != nil {
		msg = apiErr.Err.Error()
	}
	return reply{Error: &replyError{Kind: kindName(apiErr.Kind), Pod: apiErr.Pod, Attempts: apiErr.Attempts, Message: msg}}
}
