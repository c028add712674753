//! The tower plumbing the server's own layers share (request metrics, auth,
//! limits, intake), so each of them states only what it does with one
//! request: a [`Middleware`] gets the request and the inner service, and
//! either answers itself or calls the inner service.
//!
//! [`Wrap`] turns a middleware into a tower `Layer`. Its service forwards
//! readiness to the inner service, hands the middleware the clone that was
//! polled ready (tower's clone-and-swap: the clone left behind has not been
//! polled), and boxes the future so a middleware can answer from an
//! `async` block.

use futures::future::BoxFuture;
use std::task::{Context, Poll};
use tonic::body::Body;
use tower::{Layer, Service};

/// The future a middleware answers with.
pub type ResponseFuture<E> = BoxFuture<'static, Result<http::Response<Body>, E>>;

/// What a middleware calls: tonic's routes, or the next layer in.
pub trait Inner<B>:
    Service<http::Request<B>, Response = http::Response<Body>, Future: Send + 'static> + Send + 'static
{
}

impl<S, B> Inner<B> for S where
    S: Service<http::Request<B>, Response = http::Response<Body>, Future: Send + 'static>
        + Send
        + 'static
{
}

/// One layer's work on one request.
pub trait Middleware<B>: Clone {
    /// Answers `req`, or passes it (changed or not) to `inner`, which is
    /// ready and may be called once.
    fn call<S: Inner<B>>(&self, req: http::Request<B>, inner: S) -> ResponseFuture<S::Error>;
}

/// An answer given without calling the inner service (a refusal).
pub fn answer<E>(response: http::Response<Body>) -> ResponseFuture<E> {
    Box::pin(async move { Ok(response) })
}

/// The tower `Layer` of a [`Middleware`].
#[derive(Clone)]
pub struct Wrap<M>(pub M);

impl<M: Clone, S> Layer<S> for Wrap<M> {
    type Service = Wrapped<M, S>;

    fn layer(&self, inner: S) -> Wrapped<M, S> {
        Wrapped {
            middleware: self.0.clone(),
            inner,
        }
    }
}

/// The service [`Wrap`] puts in front of `S`.
#[derive(Clone)]
pub struct Wrapped<M, S> {
    middleware: M,
    inner: S,
}

impl<M, S, B> Service<http::Request<B>> for Wrapped<M, S>
where
    M: Middleware<B>,
    S: Inner<B> + Clone,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        self.middleware.call(req, ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Answers 204 unless the path is `/refuse`, which it answers 403.
    #[derive(Clone)]
    struct Gate;

    impl<B> Middleware<B> for Gate {
        fn call<S: Inner<B>>(
            &self,
            req: http::Request<B>,
            mut inner: S,
        ) -> ResponseFuture<S::Error> {
            if req.uri().path() == "/refuse" {
                let mut response = http::Response::new(Body::empty());
                *response.status_mut() = http::StatusCode::FORBIDDEN;
                return answer(response);
            }
            Box::pin(inner.call(req))
        }
    }

    /// Counts polls for readiness and calls; each clone shares the counts
    /// but knows whether it was the one polled.
    #[derive(Clone)]
    struct Counting {
        polls: Arc<AtomicUsize>,
        calls: Arc<AtomicUsize>,
        polled: bool,
    }

    impl Service<http::Request<()>> for Counting {
        type Response = http::Response<Body>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<http::Response<Body>, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            self.polled = true;
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            assert!(self.polled, "called a clone that was not polled ready");
            self.calls.fetch_add(1, Ordering::SeqCst);
            let mut response = http::Response::new(Body::empty());
            *response.status_mut() = http::StatusCode::NO_CONTENT;
            std::future::ready(Ok(response))
        }
    }

    #[tokio::test]
    async fn the_ready_inner_service_is_called_and_refusals_skip_it() {
        use tower::ServiceExt as _;
        let inner = Counting {
            polls: Arc::default(),
            calls: Arc::default(),
            polled: false,
        };
        let (polls, calls) = (inner.polls.clone(), inner.calls.clone());
        let mut service = Wrap(Gate).layer(inner);
        let request = |path| http::Request::get(path).body(()).unwrap();

        let response = service.ready().await.unwrap().call(request("/pass"));
        assert_eq!(response.await.unwrap().status(), 204);
        let response = service.ready().await.unwrap().call(request("/pass"));
        assert_eq!(response.await.unwrap().status(), 204);
        let response = service.ready().await.unwrap().call(request("/refuse"));
        assert_eq!(response.await.unwrap().status(), 403);
        assert_eq!(polls.load(Ordering::SeqCst), 3);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}
