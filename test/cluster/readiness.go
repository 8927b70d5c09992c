package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// NetworkReady asks the runtime, through the CRI as kubelet does, whether
// its network is ready; message is the runtime's reason when it is not.
// containerd 2 answers each such call by running the CNI STATUS of every
// plugin in the config it uses, when that config's cniVersion is 1.1.0 or
// later (go-cni Status, libcni GetStatusNetworkList); an error makes
// NetworkReady false, and kubelet then reports the Node NotReady.
func (n *Node) NetworkReady(ctx context.Context) (ready bool, message string, err error) {
	rt, closeConn, err := n.cri()
	if err != nil {
		return false, "", err
	}
	defer func() { _ = closeConn() }()
	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return false, "", err
	}
	for _, c := range st.GetStatus().GetConditions() {
		if c.GetType() == runtimeapi.NetworkReady {
			return c.GetStatus(), c.GetReason() + ": " + c.GetMessage(), nil
		}
	}
	return false, "", errors.New("the runtime's status has no NetworkReady condition")
}

// NodeReady is the Node's Ready condition as kubelet last reported it;
// message is its message when it is not True. err is for the API's
// answer only: a Node without the condition is not ready.
func (n *Node) NodeReady(ctx context.Context) (ready bool, message string, err error) {
	status, body, err := n.Do(ctx, http.MethodGet, "/api/v1/nodes/"+n.Name, nil)
	if err != nil {
		return false, "", err
	}
	if status != http.StatusOK {
		return false, "", fmt.Errorf("node %s: %d %s", n.Name, status, body)
	}
	var node struct {
		Status struct {
			Conditions []struct{ Type, Status, Reason, Message string }
		}
	}
	if err := json.Unmarshal(body, &node); err != nil {
		return false, "", err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True", c.Reason + ": " + c.Message, nil
		}
	}
	return false, "no Ready condition", nil
}
