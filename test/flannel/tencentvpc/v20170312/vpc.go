// Package v20170312 stands in for Tencent Cloud's VPC SDK, whose module
// the Go module proxy does not serve: flanneld links its tencent-vpc
// backend unconditionally (main.go's blank imports), and the fleet runs
// the vxlan backend. It declares exactly what that backend calls, and
// every call fails: a net-conf.json that selects tencent-vpc gets an
// error from flanneld, never a route.
package v20170312

import "errors"

var errNotBuilt = errors.New("the tencent-vpc backend is not built into this flanneld (istio-cni's test/flannel)")

// Client is the VPC API client; it has no endpoint.
type Client struct{}

// NewClientWithSecretId returns a Client whose every call fails.
func NewClientWithSecretId(secretID, secretKey, region string) (*Client, error) {
	return &Client{}, errNotBuilt
}

// Filter selects route tables.
type Filter struct {
	Name   *string
	Values []*string
}

// Route is one route of a route table.
type Route struct {
	DestinationCidrBlock *string
	GatewayType          *string
	GatewayId            *string
	RouteId              *uint64
	Enabled              *bool
	RouteType            *string
}

// RouteTable is a route table and its routes.
type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

// DescribeRouteTablesRequest lists route tables.
type DescribeRouteTablesRequest struct{ Filters []*Filter }

// DescribeRouteTablesResponse is its answer.
type DescribeRouteTablesResponse struct {
	Response *struct{ RouteTableSet []*RouteTable }
}

// CreateRoutesRequest adds routes to a table.
type CreateRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// CreateRoutesResponse is its answer.
type CreateRoutesResponse struct{}

// DeleteRoutesRequest removes routes from a table.
type DeleteRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// DeleteRoutesResponse is its answer.
type DeleteRoutesResponse struct{}

// NewDescribeRouteTablesRequest returns an empty request.
func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest {
	return &DescribeRouteTablesRequest{}
}

// NewCreateRoutesRequest returns an empty request.
func NewCreateRoutesRequest() *CreateRoutesRequest { return &CreateRoutesRequest{} }

// NewDeleteRoutesRequest returns an empty request.
func NewDeleteRoutesRequest() *DeleteRoutesRequest { return &DeleteRoutesRequest{} }

// DescribeRouteTables fails.
func (c *Client) DescribeRouteTables(*DescribeRouteTablesRequest) (*DescribeRouteTablesResponse, error) {
	return nil, errNotBuilt
}

// CreateRoutes fails.
func (c *Client) CreateRoutes(*CreateRoutesRequest) (*CreateRoutesResponse, error) {
	return nil, errNotBuilt
}

// DeleteRoutes fails.
func (c *Client) DeleteRoutes(*DeleteRoutesRequest) (*DeleteRoutesResponse, error) {
	return nil, errNotBuilt
}
