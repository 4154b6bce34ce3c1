"""The MCP proxy's parts: `upstream` (starting, holding and reading the servers fronted),
`proxy` (`McpProxy`, the guard), `serve` (stdio and HTTP, the command). Import the public names
from `engine.integrations.mcp_proxy`, whose docstring says what the proxy does."""
