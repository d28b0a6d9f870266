"""Drives a Troupe node with the A2A Python SDK 0.3.x (a2a-sdk 0.3, A2A 0.3, which
reads the card's url) as its README shows: the card resolved with
A2ACardResolver, the client made by ClientFactory with the default ClientConfig
(which streams a message when the card says the agent streams).

Usage: python a2a-py-client-03.py BASE_URL MODE

MODE default: a message streamed to its end, the task read back with get_task, a
  second message in the same context, and a message sent without streaming
  (ClientConfig(streaming=False): message/send).
MODE one: one message streamed to its end (the test makes the model slow).
MODE resubscribe: a message streamed until its first event, the stream left;
  then tasks/resubscribe to its task, followed to its end (the test makes the
  model slow: the subscription waits through a silence of seconds).

Prints one JSON object on stdout, in the shape a2a-py-client.py prints (states as
A2A 1.0 names them: TASK_STATE_COMPLETED...).
"""

import asyncio
import json
import sys
import uuid

import httpx

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.types import Message, Part, Role, TaskArtifactUpdateEvent, TaskIdParams, TaskQueryParams, TaskStatusUpdateEvent, TextPart
from a2a.utils.artifact import get_artifact_text
from a2a.utils.message import get_message_text


def state(s):
    return 'TASK_STATE_' + s.value.upper().replace('-', '_')


def message(text, context_id=None):
    return Message(role=Role.user, parts=[Part(root=TextPart(text=text))], message_id=str(uuid.uuid4()),
                   context_id=context_id)


async def stream(client, msg, events=None, first_only=False):
    """What a client saw of a streamed message (of a subscription, with events:
    client.resubscribe's), to its end or its first event."""
    out = {'events': [], 'taskId': '', 'contextId': '', 'answer': '', 'state': '', 'message': '', 'error': ''}
    try:
        async for ev in (events if events is not None else client.send_message(msg)):
            if isinstance(ev, Message):
                out['events'].append('message:' + get_message_text(ev))
                continue
            task, update = ev
            out['taskId'], out['contextId'], out['state'] = task.id, task.context_id, state(task.status.state)
            if update is None:
                out['events'].append('task:' + state(task.status.state))
            elif isinstance(update, TaskStatusUpdateEvent):
                line = 'status:' + state(update.status.state)
                if update.status.message:
                    out['message'] = get_message_text(update.status.message)
                    line += ':' + out['message']
                out['events'].append(line)
            elif isinstance(update, TaskArtifactUpdateEvent):
                text = get_artifact_text(update.artifact)
                out['answer'] = out['answer'] + text if update.append else text
                line = 'artifact:' + (update.artifact.name or '') + ':' + text
                if update.append:
                    line += ':append'
                if update.last_chunk:
                    line += ':last'
                out['events'].append(line)
            if first_only:
                break
    except A2AClientError as e:
        out['error'] = f'{type(e).__name__}: {e}'
    return out


def task_out(t):
    return {
        'id': t.id, 'contextId': t.context_id, 'state': state(t.status.state),
        'answer': '\n'.join(get_artifact_text(a) for a in t.artifacts or []),
        'artifacts': [a.name for a in t.artifacts or []],
        'history': [get_message_text(m) for m in t.history or []],
    }


async def main():
    base, mode = sys.argv[1], sys.argv[2]
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, base).get_agent_card()
    out = {'protocol': card.protocol_version}
    client = ClientFactory(ClientConfig()).create(card)
    if mode == 'one':
        out['stream'] = await stream(client, message('take your time'))
    elif mode == 'resubscribe':
        first = await stream(client, message('take your time'), first_only=True)
        out['stream'] = first
        try:
            out['subscribed'] = await stream(client, None, client.resubscribe(TaskIdParams(id=first['taskId'])))
        except Exception as e:  # what the SDK raises besides A2AClientError
            out['subscribed'] = {'events': [], 'error': f'{type(e).__name__}: {e}'[:300]}
    else:
        first = await stream(client, message('What is 12 * (7 + 5)?'))
        out['stream'] = first
        out['get'] = task_out(await client.get_task(TaskQueryParams(id=first['taskId'])))
        out['context'] = await stream(client, message('echo same session', first['contextId']))
        blocking = ClientFactory(ClientConfig(streaming=False)).create(card)
        sent = [ev async for ev in blocking.send_message(message('What is 12 * (7 + 5)?'))]
        out['send'] = {'responses': len(sent), 'task': task_out(sent[-1][0]) if isinstance(sent[-1], tuple) else None}
        await blocking.close()
    await client.close()
    print(json.dumps(out))


asyncio.run(main())
