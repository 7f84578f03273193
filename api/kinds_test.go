package api

// The api's tests run jobs of every kind: register them, as the binary does.
import _ "github.com/mlstream/mlstream/kinds/all"
