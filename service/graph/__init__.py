"""Microsoft Graph for the agent user: the client (a façade over the resource clients and their
transport), its models and errors, and the token flow (``auth``)."""

from service.graph.client import GraphClient
from service.graph.errors import (
    GraphAuthError,
    GraphBadRequest,
    GraphConnectionError,
    GraphError,
    GraphForbidden,
    GraphNotFound,
    GraphPayloadError,
    GraphServerError,
    GraphThrottled,
    GraphUnavailable,
    TokenAcquisitionError,
    TokenConfigurationError,
)
from service.graph.http_pool import new_http_client
from service.graph.models import (
    Chat,
    ChatMember,
    ChatMessage,
    ChatMessagePreview,
    EmailAddress,
    ItemBody,
    MailMessage,
    MessageSender,
    User,
)
from service.graph.options import GraphOptions
from service.graph.pages import Page
from service.graph.resources.chats import ChatSweep
from service.graph.urls import graph_timestamp

__all__ = [
    "Chat",
    "ChatMember",
    "ChatMessage",
    "ChatMessagePreview",
    "ChatSweep",
    "EmailAddress",
    "GraphAuthError",
    "GraphBadRequest",
    "GraphClient",
    "GraphConnectionError",
    "GraphError",
    "GraphForbidden",
    "GraphNotFound",
    "GraphOptions",
    "GraphPayloadError",
    "GraphServerError",
    "GraphThrottled",
    "GraphUnavailable",
    "ItemBody",
    "MailMessage",
    "MessageSender",
    "Page",
    "TokenAcquisitionError",
    "TokenConfigurationError",
    "User",
    "graph_timestamp",
    "new_http_client",
]
