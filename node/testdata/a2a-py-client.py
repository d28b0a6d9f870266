"""Drives a Troupe node with the A2A Python SDK (a2a-sdk 1.x) as its README shows:
the card resolved with A2ACardResolver, the client made by ClientFactory with the
default ClientConfig (which streams a message when the card says the agent streams).

Usage: python a2a-py-client.py BASE_URL MODE [ARG]

MODE default: A2A 1.0 (the card's supportedInterfaces): a message streamed to its
  end, the task read back with get_task, a second message in the same context, and
  a message sent without streaming (ClientConfig(streaming=False): SendMessage,
  which answers when the task ended).
MODE legacy: the same on the card as a 0.3-only server serves it (without
  supportedInterfaces): the SDK speaks A2A 0.3 (message/stream, tasks/get, ...).
MODE cancel: a message streamed; at its first event the task is cancelled
  (cancel_task) while the stream goes on to its end; then the task, cancelled,
  is cancelled again (the error's class and message in "again").
MODE approve [CARD_PATH]: a message to an agent whose tool call waits for approval,
  streamed until the task asks for input, then answered "approve" (same task and
  context), streamed to its end.
MODE one: one message streamed to its end (the test makes the model slow, or
  stream its tokens).
MODE subscribe [CARD_PATH]: a message to an agent whose tool call waits for
  approval, streamed until the task asks for input; then subscribe (1.0's
  SubscribeToTask) to the task, which another client approves (a message sent
  without streaming): the subscription follows the task to its end. Then
  subscribe to the ended task, and to an unknown one.
MODE push: a message sent, then a push notification config of its task created,
  read, listed and deleted.
MODE hostile: odd text echoed back (unicode, escapes, NUL, control characters),
  a text of the node's input limit (1 MiB) and one a byte over it, one over the
  body limit (2 MiB), an empty one, an unknown task, and requests the SDK would
  not send (raw JSON-RPC): each must end in an answer or a JSON-RPC error, within
  a bounded time.

Prints one JSON object on stdout.
"""

import asyncio
import json
import sys
import time
import uuid

import httpx

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.helpers import get_artifact_text, get_message_text, new_text_message
from a2a.utils.errors import A2AError
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)


def state(s):
    return TaskState.Name(s)


def request(text, context_id=None, task_id=None):
    return SendMessageRequest(
        message=new_text_message(text, context_id=context_id, task_id=task_id, role=Role.ROLE_USER)
    )


class Stream:
    """What a client saw of a streamed message: each event as a line, the task, the
    answer artifact's text as the client folds it (append or replace), the last
    state."""

    def __init__(self):
        self.events = []
        self.task_id = ''
        self.context_id = ''
        self.answer = ''
        self.state = ''
        self.message = ''
        self.error = ''

    def see(self, ev):
        if ev.HasField('task'):
            t = ev.task
            self.task_id, self.context_id, self.state = t.id, t.context_id, state(t.status.state)
            self.events.append('task:' + self.state)
        elif ev.HasField('status_update'):
            u = ev.status_update
            self.task_id, self.context_id, self.state = u.task_id, u.context_id, state(u.status.state)
            line = 'status:' + self.state
            if u.status.HasField('message'):
                self.message = get_message_text(u.status.message)
                line += ':' + self.message
            self.events.append(line)
        elif ev.HasField('artifact_update'):
            u = ev.artifact_update
            text = get_artifact_text(u.artifact)
            self.answer = self.answer + text if u.append else text
            line = 'artifact:' + u.artifact.name + ':' + text
            if u.append:
                line += ':append'
            if u.last_chunk:
                line += ':last'
            self.events.append(line)
        elif ev.HasField('message'):
            self.events.append('message:' + get_message_text(ev.message))

    def out(self):
        return {
            'events': self.events, 'taskId': self.task_id, 'contextId': self.context_id,
            'answer': self.answer, 'state': self.state, 'message': self.message, 'error': self.error,
        }


async def stream(client, req, on_event=None):
    s = Stream()
    try:
        async for ev in client.send_message(req):
            s.see(ev)
            if on_event:
                await on_event(s)
    except A2AError as e:
        s.error = f'{type(e).__name__}: {e}'
    return s


def task_out(t):
    return {
        'id': t.id, 'contextId': t.context_id, 'state': state(t.status.state),
        'answer': '\n'.join(get_artifact_text(a) for a in t.artifacts),
        'artifacts': [a.name for a in t.artifacts],
        'history': [get_message_text(m) for m in t.history],
    }


async def card_of(base, card_path=None):
    async with httpx.AsyncClient() as http:
        resolver = A2ACardResolver(http, base)
        return await resolver.get_agent_card(relative_card_path=card_path)


async def legacy_card(base):
    """The node's card as a 0.3-only server serves it: without supportedInterfaces."""
    async with httpx.AsyncClient() as http:
        r = await http.get(base + '/.well-known/agent-card.json')
        r.raise_for_status()
        data = r.json()
    del data['supportedInterfaces']
    return parse_agent_card(data)


async def conversation(card):
    """A streamed message, get_task, a second message in its context, a blocking one."""
    out = {'protocol': card.supported_interfaces[0].protocol_version if card.supported_interfaces else ''}
    async with ClientFactory(ClientConfig()).create(card) as client:
        out['transport'] = type(client._transport).__name__
        first = await stream(client, request('What is 12 * (7 + 5)?'))
        out['stream'] = first.out()
        got = await client.get_task(GetTaskRequest(id=first.task_id))
        out['get'] = task_out(got)
        second = await stream(client, request('echo same session', context_id=first.context_id))
        out['context'] = second.out()
    async with ClientFactory(ClientConfig(streaming=False)).create(card) as client:
        sent = [ev async for ev in client.send_message(request('What is 12 * (7 + 5)?'))]
        out['send'] = {'responses': len(sent), 'task': task_out(sent[-1].task) if sent[-1].HasField('task') else None}
    return out


async def cancel(card):
    out = {}
    async with ClientFactory(ClientConfig()).create(card) as client:
        async def cancel_at_first(s):
            if 'cancel' not in out:
                out['cancel'] = {}
                t = await client.cancel_task(CancelTaskRequest(id=s.task_id))
                out['cancel'] = task_out(t)

        s = await stream(client, request('think hard about this'), cancel_at_first)
        out['stream'] = s.out()
        out['get'] = task_out(await client.get_task(GetTaskRequest(id=s.task_id)))
        try:
            t = await client.cancel_task(CancelTaskRequest(id=s.task_id))
            out['again'] = 'answered ' + TaskState.Name(t.status.state)
        except A2AError as e:
            out['again'] = f'{type(e).__name__}: {e}'
    return out


async def approve(card):
    out = {}
    async with ClientFactory(ClientConfig()).create(card) as client:
        first = await stream(client, request('mail bob'))
        out['first'] = first.out()
        second = await stream(client, request('approve', context_id=first.context_id, task_id=first.task_id))
        out['second'] = second.out()
        out['get'] = task_out(await client.get_task(GetTaskRequest(id=first.task_id)))
    return out


async def one(card):
    async with ClientFactory(ClientConfig()).create(card) as client:
        return {'stream': (await stream(client, request('take your time'))).out()}


async def subscribed(client, task_id, on_event=None):
    s = Stream()
    try:
        async for ev in client.subscribe(SubscribeToTaskRequest(id=task_id)):
            s.see(ev)
            if on_event:
                await on_event(s)
    except A2AError as e:
        s.error = f'{type(e).__name__}: {e}'
    return s


async def subscribe(card):
    out = {}
    async with ClientFactory(ClientConfig()).create(card) as client, \
            ClientFactory(ClientConfig(streaming=False)).create(card) as other:
        first = await stream(client, request('mail bob'))
        out['first'] = first.out()

        async def approve_once(s):
            if 'approved' not in out:
                out['approved'] = {}
                sent = [ev async for ev in other.send_message(
                    request('approve', context_id=first.context_id, task_id=first.task_id))]
                out['approved'] = task_out(sent[-1].task)

        out['subscribed'] = (await subscribed(client, first.task_id, approve_once)).out()
        out['ended'] = (await subscribed(client, first.task_id)).out()
        out['unknown'] = (await subscribed(client, first.context_id + '~0123456789abcdef0123456789abcdef')).out()
    return out


async def push(card):
    out = {}
    async with ClientFactory(ClientConfig(streaming=False)).create(card) as client:
        sent = [ev async for ev in client.send_message(request('echo push me'))]
        task_id = sent[-1].task.id
        out['taskId'] = task_id

        def cfg_out(c):
            return {'id': c.id, 'taskId': c.task_id, 'url': c.url, 'token': c.token,
                    'scheme': c.authentication.scheme, 'credentials': c.authentication.credentials}

        made = await client.create_task_push_notification_config(TaskPushNotificationConfig(
            task_id=task_id, id='hook-1', url='https://hooks.example.com/a2a', token='tok',
            authentication=AuthenticationInfo(scheme='Bearer', credentials='secret')))
        out['made'] = cfg_out(made)
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id='hook-1'))
        out['got'] = cfg_out(got)
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id))
        out['listed'] = [cfg_out(c) for c in listed.configs]
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id='hook-1'))
        after = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id))
        out['after'] = len(after.configs)
        try:
            await client.create_task_push_notification_config(TaskPushNotificationConfig(
                task_id='no-such-task', id='hook-2', url='https://hooks.example.com/a2a'))
            out['unknownTask'] = 'set'
        except A2AError as e:
            out['unknownTask'] = f'{type(e).__name__}: {e}'
    return out


# ODD is echoed back whole: it neither begins nor ends with white space (the echo
# trims it).
ODD = ('héllo wörld 🌍 ✓ 日本語 עברית \u202e "quoted" \\back\\slash\\ \\u0041 </script> &amp; '
       'nul:\u0000 bell:\u0007 esc:\u001b del:\u007f tab:\t cr:\r lf:\n ls:\u2028 bom:\ufeff '
       'max:\U0010ffff end')


async def hostile(base, card):
    out = {}
    async with ClientFactory(ClientConfig()).create(card) as client:
        s = await stream(client, request('echo ' + ODD))
        out['odd'] = s.out()
        out['oddWant'] = ODD
        if s.task_id:
            out['oddGet'] = task_out(await client.get_task(GetTaskRequest(id=s.task_id)))
        # The node takes an input of 1 MiB at most, and a request body of 2 MiB:
        # an input of 1 MiB is a task like another, one a byte longer is refused
        # (InvalidParams), a body over 2 MiB too (HTTP 413); so is a message
        # without text.
        # (Words: a single word that long takes the node's token counting minutes.)
        words = 'echo ' + ('lorem ipsum dolor sit amet ' * 40000)[:(1 << 20) - 5 - 3] + 'end'
        for name, text in (('under', words), ('over', words + '!'), ('huge', words * 2), ('empty', '')):
            s = await stream(client, request(text))
            out[name] = {'state': s.state, 'answerLen': len(s.answer.encode()), 'error': s.error, 'events': len(s.events),
                         'contextId': s.context_id}
        try:
            await client.get_task(GetTaskRequest(id='no-such-task'))
            out['unknown'] = 'answered'
        except A2AError as e:
            out['unknown'] = f'{type(e).__name__}: {e}'
    # What the SDK would not send: raw JSON-RPC, each answered (an error or a
    # result) within the timeout, never held.
    raw = {
        'loneSurrogate': b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"'
        + str(uuid.uuid4()).encode() + b'","role":"ROLE_USER","parts":[{"text":"echo a\\ud800b"}]}}}',
        'invalidUtf8': b'{"jsonrpc":"2.0","id":2,"method":"SendMessage","params":{"message":{"messageId":"'
        + str(uuid.uuid4()).encode() + b'","role":"ROLE_USER","parts":[{"text":"echo a\xff\xfeb"}]}}}',
        'deepParams': b'{"jsonrpc":"2.0","id":3,"method":"SendMessage","params":' + b'[' * 100000 + b']' * 100000 + b'}',
        'nulInJSON': b'{"jsonrpc":"2.0","id":4,"method":"SendMessage","params":{"message":{"messageId":"m\x00","role":"ROLE_USER","parts":[{"text":"hi"}]}}}',
        'noParts': b'{"jsonrpc":"2.0","id":5,"method":"SendStreamingMessage","params":{"message":{"messageId":"'
        + str(uuid.uuid4()).encode() + b'","role":"ROLE_USER","parts":[]}}}',
        'wrongTypes': b'{"jsonrpc":"2.0","id":6,"method":"SendMessage","params":{"message":{"messageId":7,"role":[],"parts":{"text":1}}}}',
        'truncated': b'{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{"message":{"messageId":"x",',
    }
    url = card.supported_interfaces[0].url
    out['raw'] = {}
    async with httpx.AsyncClient(timeout=30) as http:
        for name, body in raw.items():
            began = time.monotonic()
            try:
                r = await http.post(url, content=body, headers={'Content-Type': 'application/json', 'A2A-Version': '1.0'})
                text = r.text
                try:
                    first = text.strip().splitlines()[-1] if 'text/event-stream' in r.headers.get('content-type', '') else text
                    if first.startswith('data: '):
                        first = first[len('data: '):]
                    doc = json.loads(first)
                except (ValueError, IndexError):
                    doc = {}
                err = doc.get('error') or {}
                res = doc.get('result') or {}
                out['raw'][name] = {
                    'status': r.status_code, 'code': err.get('code', 0), 'message': err.get('message', ''),
                    'result': bool(res), 'body': text[:300],
                }
            except httpx.HTTPError as e:
                out['raw'][name] = {'error': f'{type(e).__name__}: {e}'}
            out['raw'][name]['seconds'] = round(time.monotonic() - began, 1)
    return out


async def main():
    base, mode = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else 'default'
    arg = sys.argv[3] if len(sys.argv) > 3 else None
    if mode == 'legacy':
        card = await legacy_card(base)
    else:
        card = await card_of(base, arg)
    if mode in ('default', 'legacy'):
        out = await conversation(card)
    elif mode == 'cancel':
        out = await cancel(card)
    elif mode == 'approve':
        out = await approve(card)
    elif mode == 'one':
        out = await one(card)
    elif mode == 'subscribe':
        out = await subscribe(card)
    elif mode == 'push':
        out = await push(card)
    elif mode == 'hostile':
        out = await hostile(base, card)
    else:
        raise SystemExit(f'unknown mode {mode}')
    print(json.dumps(out))


asyncio.run(main())
